"""Request and response models of the REST API (pydantic v2).

Worker-facing models live in :mod:`service.schemas.worker`; everything is re-exported here.
"""

from service.schemas.artifacts import *  # noqa: F403
from service.schemas.artifacts import __all__ as _artifacts_all
from service.schemas.client_results import *  # noqa: F403
from service.schemas.client_results import __all__ as _client_results_all
from service.schemas.common import *  # noqa: F403
from service.schemas.common import __all__ as _common_all
from service.schemas.configs import *  # noqa: F403
from service.schemas.configs import __all__ as _configs_all
from service.schemas.jobs import *  # noqa: F403
from service.schemas.jobs import __all__ as _jobs_all
from service.schemas.worker import *  # noqa: F403
from service.schemas.worker import __all__ as _worker_all

__all__ = [
    *_common_all,
    *_jobs_all,
    *_worker_all,
    *_configs_all,
    *_client_results_all,
    *_artifacts_all,
]
