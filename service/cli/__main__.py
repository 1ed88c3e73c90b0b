"""``python -m service.cli``: the same as the ``tunehub`` console script."""

from service.cli.main import main

main()
