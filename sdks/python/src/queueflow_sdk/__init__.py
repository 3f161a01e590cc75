"""QueueFlow SDK for Python: an asyncio REST client and a remote-worker runtime.

    from queueflow_sdk import Client, Worker

See the README for a walkthrough.
"""

from queueflow_sdk import models
from queueflow_sdk._version import __version__
from queueflow_sdk.backoff import Backoff
from queueflow_sdk.client import Client
from queueflow_sdk.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    QueueFlowError,
    ServerError,
    ServiceUnavailable,
    TransportError,
    Unauthorized,
    UnexpectedResponse,
)
from queueflow_sdk.models import (
    CreateJobRequest,
    CreateWorkflowRequest,
    ErrorBody,
    Job,
    JobConfig,
    JobConfigRequest,
    UniquePolicy,
    WaitForEvent,
    WorkflowStep,
    sleep_step,
    sleep_until_step,
    wait_for_event_step,
)
from queueflow_sdk.sse import ServerSentEvent
from queueflow_sdk.worker import Handler, JobContext, Worker

__all__ = [
    "ApiError",
    "Backoff",
    "BadRequest",
    "Client",
    "Conflict",
    "CreateJobRequest",
    "CreateWorkflowRequest",
    "ErrorBody",
    "Forbidden",
    "Handler",
    "Job",
    "JobConfig",
    "JobConfigRequest",
    "JobContext",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "QueueFlowError",
    "ServerError",
    "ServerSentEvent",
    "ServiceUnavailable",
    "TransportError",
    "Unauthorized",
    "UnexpectedResponse",
    "UniquePolicy",
    "WaitForEvent",
    "Worker",
    "WorkflowStep",
    "__version__",
    "models",
    "sleep_step",
    "sleep_until_step",
    "wait_for_event_step",
]
