"""python -m hydra_plugins.olmocr_launchers.beaker_job PAYLOAD RESULT_DIR — run one shipped Hydra job.

The Beaker launcher re-runs a stage with ``python -m <package>``. A task function that has no such
entry (defined in a script's ``__main__``, a notebook or a test) is shipped instead: the function, the
job's composed config and Hydra's global state (config store, resolvers), pickled with cloudpickle
into PAYLOAD. The job's ``JobReturn`` is written to ``RESULT_DIR/job_return.pkl``, Beaker's result
dataset, where a following launcher reads it back.
"""

import base64
import os
import sys
import zlib

import cloudpickle
from hydra._internal.callbacks import Callbacks
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobStatus, run_job, setup_globals
from hydra.types import HydraContext

RESULT_FILE = "job_return.pkl"


def encode(obj) -> str:
    return base64.b64encode(zlib.compress(cloudpickle.dumps(obj))).decode("ascii")


def decode(payload: str):
    return cloudpickle.loads(zlib.decompress(base64.b64decode(payload)))


def main(payload: str, result_dir: str) -> int:
    task_function, config, state = decode(payload)
    Singleton.set_state(state)
    setup_globals()
    HydraConfig.instance().set_config(config)
    ret = run_job(hydra_context=HydraContext(config_loader=None, callbacks=Callbacks(config)),
                  task_function=task_function, config=config, job_dir_key="hydra.sweep.dir",
                  job_subdir_key="hydra.sweep.subdir")
    os.makedirs(result_dir, exist_ok=True)
    with open(os.path.join(result_dir, RESULT_FILE), "wb") as fh:
        cloudpickle.dump(ret, fh)
    return 1 if ret.status == JobStatus.FAILED else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
