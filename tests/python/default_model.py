"""The default model's path for the tests: $KVSHARE_MODEL (ctest sets it), else
where scripts/fetch_model.py puts it ($KVSHARE_MODEL_DIR, else
$XDG_CACHE_HOME/kvshare, else ~/.cache/kvshare)."""
import importlib.util
import os
from pathlib import Path

_FETCH = Path(__file__).resolve().parents[2] / "scripts" / "fetch_model.py"


def _fetch_module():
    spec = importlib.util.spec_from_file_location("kvshare_fetch_model", _FETCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fetch = _fetch_module()
DEFAULT_MODEL = Path(os.environ.get("KVSHARE_MODEL") or _fetch.default_model_dir() / _fetch.MODEL_NAME)
