"""What a run folder's record may ask of this machine and of the user's account (grants.py; no engine)."""
from __future__ import annotations

import pytest

from insandbox.replay.grants import check_model_server, check_spending, sandbox_settings
from insandbox.runs.safe_files import UnsafeRunFolder


def test_a_record_gets_no_more_than_the_defaults_unless_the_caller_gives_it():
    safe = {"network": "registries", "memory": "1g", "cpus": 1.0, "image": "insandbox:latest", "cap_add": [],
            "env": {"A": "1"}, "input_dir": "/home/u/.ssh", "gguf": "/x", "prices": "/y", "runs_root": "/z",
            "backend": "other", "n_ctx": 10 ** 9}
    out, granted = sandbox_settings(safe)
    assert out == {"network": "registries", "memory": "1g", "cpus": 1.0, "image": "insandbox:latest", "cap_add": [],
                   "env": {"A": "1"}} and granted == []
    for key, value, option in (("network", "host", "--network host"), ("network", "container:x", "--network "
                                                                                                 "container:x"),
                               ("network", "mynet", "--network mynet"), ("cap_add", ["NET_RAW"], "--cap-add NET_RAW"),
                               ("runtime", "runsc", "--runtime runsc"), ("image", "evil:1", "--image evil:1"),
                               ("memory", "5g", "--memory 5g"), ("memory", None, "--memory none"),
                               ("disk", "11g", "--disk 11g"), ("pids_limit", 2048, "--pids-limit 2048"),
                               ("output_max_file_bytes", 2 * 1024 ** 3, "--max-output-file-size 2g"),
                               ("output_max_files", None, "--max-output-files 0")):
        with pytest.raises(UnsafeRunFolder, match=f"asks for {option};"):
            sandbox_settings({key: value})
        out, granted = sandbox_settings({key: value}, {key: value})
        assert out[key] == value and granted == [option]
    out, granted = sandbox_settings({"network": "host"}, {"network": "none"})  # replaced, nothing granted
    assert out["network"] == "none" and granted == []


def test_a_fork_asks_no_model_server_a_record_names_not_even_one_on_loopback():
    for url in (None, "embedded"):  # the embedded model; a run that recorded none: this user's own default
        check_model_server(url, {})
    for url in ("http://127.0.0.1:8000/v1", "http://localhost:1/v1", "http://[::1]:1/v1", "http://127.0.0.2:9/v1",
                "https://api.example.com/v1", "http://10.0.0.2:8000/v1", "http://0.0.0.0:8000/v1",
                "http://u:***@127.0.0.1:1/v1", "http://u:k@localhost:1/v1", "file:///etc/passwd", "x" * 10_000):
        with pytest.raises(UnsafeRunFolder, match="pass --base-url") as refused:
            check_model_server(url, {})
        assert len(str(refused.value).splitlines()) == 1 and len(str(refused.value)) < 600
        check_model_server(url, {"base_url": url})  # named on the command line: the user's choice
        check_model_server(url, {"base_url": "http://127.0.0.1:1/v1"})
        check_model_server(url, {"gguf": "/models/m.gguf"})
    with pytest.raises(UnsafeRunFolder, match="pass --base-url"):  # --model or --api-key alone: not where to
        check_model_server("http://127.0.0.1:8000/v1", {"model": "m", "api_key": "sk-x", "base_url": None})


def test_what_a_fork_spends_is_not_raised_on_a_records_word():
    check_spending({"max_steps": 100, "extra_body": None}, {})
    check_spending({"max_steps": 20, "extra_body": {}}, {})
    with pytest.raises(UnsafeRunFolder, match=r"asks for --extra-body '\{\"model\": \"o1-pro\", \"n\": 64\}' "
                                              r"--max-steps 100000;"):
        check_spending({"extra_body": {"model": "o1-pro", "n": 64}, "max_steps": 100_000}, {"max_steps": None})
    with pytest.raises(UnsafeRunFolder, match=r"--extra-body \(its 10,009 characters\);"):
        check_spending({"extra_body": {"x": "y" * 10_000}}, {})
    check_spending({"extra_body": {"n": 64}, "max_steps": 10 ** 6}, {"extra_body": {}, "max_steps": 10})  # replaced
