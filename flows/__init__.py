"""Prefect 3 flows of envace: data versioning, training, evaluation, TTS and ablation sweeps, the
full pipeline. Flows are thin: each task calls one envace function with a validated config. The folder installs
as `envace_flows` (pyproject.toml's package-dir); prefect.yaml's entrypoints name its files by path.

Importing this package sets Prefect's offline defaults (unless already set): the ephemeral server's
first start takes about 20 s on 2 cores, past Prefect's 20 s default timeout, and it would try to send
telemetry. Prefect's ephemeral mode is the default; set PREFECT_API_URL to use a running server. It also
sets envace's CPU thread policy's environment (envace.cpu_threads) before any flow imports torch. The flows
need the flows extra (`pip install 'envace[flows]'`); without Prefect, importing this package says so.
"""

import os

from envace.cpu_threads import configure_environment
from envace.extras import check

check("prefect", "flows", "the envace_flows package (Prefect flows)")  # names the extra before a flow imports it
configure_environment()  # OpenMP's wait policy before any flow imports torch (envace.cpu_threads)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
