"""An unofficial QueueFlow SDK for Python: an asyncio REST client and a remote-worker runtime.

    from unofficial_queueflow_client import Client, Worker

See the README for a walkthrough.
"""

from unofficial_queueflow_client import models
from unofficial_queueflow_client._version import __version__
from unofficial_queueflow_client.backoff import Backoff
from unofficial_queueflow_client.client import Client
from unofficial_queueflow_client.errors import (
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
from unofficial_queueflow_client.models import (
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
from unofficial_queueflow_client.push import InvalidPushDelivery, PushDelivery, PushRejection, PushVerifier
from unofficial_queueflow_client.sse import ServerSentEvent
from unofficial_queueflow_client.worker import Handler, JobContext, Worker

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
    "InvalidPushDelivery",
    "Job",
    "JobConfig",
    "JobConfigRequest",
    "JobContext",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "PushDelivery",
    "PushRejection",
    "PushVerifier",
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
