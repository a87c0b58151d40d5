"""client_sdk: the device side of ldp-telemetry (standard library + ldp_core only).

Every value is randomised on the device by its metric's epsilon-LDP mechanism
before anything is queued; only the randomised report is spooled and sent.

>>> from client_sdk import Client
>>> with Client("https://collector.example", api_key="...",
...             metrics="metrics.json") as ldp:                # doctest: +SKIP
...     ldp.record("browser", "firefox")       # randomised now, queued, returns at once
...     ldp.record("session_minutes", 12.5)
>>> print(ldp.privacy_report())                               # doctest: +SKIP

``url``, ``api_key`` and ``state_dir`` default to ``$LDP_COLLECTOR_URL``,
``$LDP_API_KEY`` and ``$LDP_STATE_DIR`` (else the platform's per-user state
folder); ``metrics=`` is the catalog bundled with the app (a JSON file as
``GET /v1/metrics`` answers, or a list of specs), so a first run records even
offline.  A metric unknown before the first fetch of the specs is held in
memory (``HoldConfig``) and randomised when they arrive.

Public API
----------
``Client``          one device: secret, ledger, spool, sender thread
``Fleet``/``Device`` many logical devices sharing one queue and sender (demos)
``DeliveryConfig``  batching, retries, quotas, durability
``HoldConfig``      values of metrics not known yet (first run): how many, how long
``PrivacyCaps``     the most epsilon a spec may ask of this device (default 4 / 8)
``Transport``, ``Response``, ``UrllibTransport``  the HTTP seam
``RecordResult``/``RecordStatus``, ``Counters``, ``PrivacyReport``,
``UnitSpend``, ``LifetimeSpend``  what the SDK returns

Exceptions (see ``client_sdk._errors``)::

    SdkError
    ├── ConfigError (ValueError)   a bad argument (http to a remote host, no url/key)
    └── StateError  (OSError)      state_dir unusable; never raised by Client(...):
                                   it runs disabled instead (record answers
                                   state_unavailable; one WARNING; no in-memory
                                   ledger, which a restart would reset)
    ValueError                     record() with strict=True: value outside the domain
                                   (default: refused as invalid_value, numbers clamped)

Delivery: a background thread sends gzip batches after ``batch_size`` reports
or ``interval`` seconds (defaults 100 / 30 s); retries use capped exponential
backoff with full jitter, 429/503 honour Retry-After (clamped), other 4xx are
final and counted in ``counters().dropped`` by reason, except 401/403 (a wrong
key: logged at ERROR, counted in ``config_errors``, reports kept and retried);
a ``duplicate`` answer counts as delivered.  ``flush(timeout)``,
``close(timeout)``, ``with``, and an atexit hook with a deadline
(``DeliveryConfig.atexit_timeout``).

Durability (``DeliveryConfig.durability``): "record" (default) commits each
report to the sqlite spool before ``record`` returns, so a kill -9 loses
nothing; "batch" queues in memory and spools every ``persist_interval``
(~2x faster; a kill -9 loses the last moments' reports, unsent and uncharged).

Many devices in one process (demos, load tests)::

    fleet = Fleet(url, api_key=key, background=False)   # shared catalog, queue, sender
    fleet.refresh_metrics(5)
    for _ in range(20_000):
        fleet.device().record("browser", "firefox")       # each: own secret and ledger
    fleet.flush(60)

``benchmarks/bench_sdk.py`` prints the median cost of ``record`` per mechanism.

State directory layout (folder 0700, every file 0600): ``device_secret``,
``metrics.json`` (spec cache), ``spool.sqlite3`` (+ WAL; spool, epsilon ledger
per metric name and epoch, lifetime ledger keyed by HMAC, epoch high-water
marks, version fingerprints), ``opted_out`` (marker).
"""

from client_sdk._client import Client
from client_sdk._config import DeliveryConfig, HoldConfig, PrivacyCaps, default_state_dir
from client_sdk._errors import ConfigError, SdkError, StateError
from client_sdk._fleet import Device, Fleet
from client_sdk._results import (
    Counters,
    LifetimeSpend,
    PrivacyReport,
    RecordResult,
    RecordStatus,
    UnitSpend,
)
from client_sdk._transport import Response, Transport, UrllibTransport
from ldp_core.version import package_version

__all__ = [
    "Client",
    "ConfigError",
    "Counters",
    "DeliveryConfig",
    "Device",
    "Fleet",
    "HoldConfig",
    "LifetimeSpend",
    "PrivacyCaps",
    "PrivacyReport",
    "RecordResult",
    "RecordStatus",
    "Response",
    "SdkError",
    "StateError",
    "Transport",
    "UnitSpend",
    "UrllibTransport",
    "__version__",
    "default_state_dir",
]


#: The version of the ldp-telemetry distribution this SDK came with.
__version__ = package_version()
