"""pytest configuration of the Python peer suite: records the versions of the
peers (onnxruntime, onnx, numpy) and of kvshare, in the report header (-v) and
in the terminal summary (always, also under -q)."""
import importlib


def _version(module):
    try:
        m = importlib.import_module(module)
    except ImportError:
        return "not installed"
    return f"{getattr(m, '__version__', '?')} ({getattr(m, '__file__', '?')})"


def _lines():
    return [f"peer {m}: {_version(m)}" for m in ("onnxruntime", "onnx", "numpy", "ml_dtypes", "kvshare")]


def pytest_report_header(config):
    return _lines()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    terminalreporter.section("kvshare peers")
    for line in _lines():
        terminalreporter.write_line(line)
