"""Reading Harbor task folders (bench/harbor/task.py): Harbor's spellings, old ones included, and a
one-line refusal for what insandbox cannot honour or a folder that is not a task."""
from __future__ import annotations

import pytest

from insandbox.bench.harbor import environment, is_harbor_path, load_tasks
from insandbox.bench.harbor.verifier import parse_json, parse_text, primary, script
from insandbox.core.errors import ConfigError
from tests.bench.harbor.tasks import write_task


def test_current_and_older_spellings(tmp_path):
    new = write_task(tmp_path, "new", toml='[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\nuser = "tester"\n'
                                           'environment_mode = "separate"\nenv = { JUDGE = "${HOME}" }\n'
                                           '[environment]\ncpus = 2\nmemory_mb = 2048\nstorage_mb = 4096\n'
                                           'network_mode = "allowlist"\nallowed_hosts = ["PyPI.org", "example.org"]\n')
    old = write_task(tmp_path, "old", toml='[environment]\nmemory = "4G"\nstorage = "512M"\nallow_internet = false\n')
    a, b = load_tasks(new)[0], load_tasks(old)[0]
    assert (a.agent_timeout_s, a.verifier.timeout_s, a.verifier.user, a.verifier.separate) == (120, 30, "tester", True)
    e = a.environment
    assert (e.cpus, e.memory_mb, e.storage_mb, e.network, e.allowed_hosts) == (
        2.0, 2048, 4096, "registries", ("example.org", "pypi.org"))
    assert (b.environment.memory_mb, b.environment.storage_mb, b.environment.network) == (4096, 512, "none")
    assert b.verifier.timeout_s == 600 and not b.verifier.separate and b.agent_timeout_s is None
    assert [t.name for t in load_tasks(tmp_path)] == ["new", "old"] and is_harbor_path(tmp_path)
    assert not is_harbor_path(tmp_path / "new" / "tests")
    # the verifier's script: the timeout around test.sh, its user, its variables from this machine
    text = script(a, {"JUDGE": "k"})
    assert "timeout -k 5 30 runuser -u tester -- env JUDGE=k bash /tests/test.sh" in text
    assert text.startswith("rm -rf -- /logs/verifier && mkdir -p -- /logs/verifier")


@pytest.mark.parametrize("toml, says", [
    ("[[steps]]\nname = 'one'\n", "multi-step tasks"),
    ("[environment]\ngpus = 1\n", "GPUs"),
    ("[environment]\nos = 'windows'\n", "only Linux"),
    ("[environment]\nnetwork_mode = 'open'\n", "network_mode = 'open'"),
    ("[environment]\nnetwork_mode = 'allowlist'\n", "needs allowed_hosts"),
    ("[environment]\nnetwork_mode = 'allowlist'\nallowed_hosts = ['*.example.org']\n", "no wildcards"),
    ("[environment]\nmemory = 'lots'\n", "a size like 512M"),
    ("[verifier]\ntimeout_sec = -1\n", "positive number of seconds"),
    ("[verifier]\nenvironment_mode = 'other'\n", "\"shared\" or \"separate\""),
    ("[verifier\n", "not valid TOML"),
])
def test_what_cannot_be_honoured_is_refused_in_one_line(tmp_path, toml, says):
    task = write_task(tmp_path, "t", toml=toml)
    with pytest.raises(ConfigError) as e:
        load_tasks(task)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_folder_that_is_not_a_task(tmp_path):
    task = write_task(tmp_path, "t")
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(ConfigError, match="no tests/test.sh"):
        load_tasks(task)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither a Harbor task folder"):
        load_tasks(tmp_path / "empty")
    dup = tmp_path / "dup"
    write_task(dup, "a", toml='[task]\nname = "same"\n')
    write_task(dup, "b", toml='[task]\nname = "same"\n')
    with pytest.raises(ConfigError, match="two tasks are named 'same'"):
        load_tasks(dup)


def test_rewards_as_harbor_reads_them():
    assert parse_text(" 0.5\n") == {"reward": 0.5}
    assert parse_json('{"reward": 1, "style": 0}') == {"reward": 1.0, "style": 0.0}
    assert primary({"a": 1.0, "b": 0.0}) == 0.5 and primary({"only": 0.3}) == 0.3
    for bad in ("", "nan", "inf", "one"):
        with pytest.raises(ValueError):
            parse_text(bad)
    for bad in ("", "{}", '{"reward": "1"}', '{"reward": true}', '{"reward": NaN}', "[1", '{"a": 1e999}'):
        with pytest.raises(ValueError):
            parse_json(bad)


def test_the_image_tag_follows_the_environment_s_content(tmp_path):
    task = write_task(tmp_path, "t")
    env = task / "environment"
    first = environment.content_tag(env)
    assert environment.content_tag(env) == first and first.startswith("insandbox-harbor:")
    (env / "data.txt").write_text("changed")
    assert environment.content_tag(env) != first
    (env / "data.txt").chmod(0o600)
    changed = environment.content_tag(env)
    (env / "data.txt").chmod(0o644)
    assert environment.content_tag(env) != changed


def test_archives_unpack_by_rules(tmp_path, monkeypatch):
    import io
    import tarfile
    import zipfile

    from insandbox.bench.harbor.archive import unpack

    monkeypatch.setenv("INSANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    task = write_task(tmp_path / "src", "packed")
    good = tmp_path / "task.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(task, arcname="packed")
    folder = unpack(good)
    assert folder.name == "packed" and load_tasks(folder)[0].name == "packed"
    assert (folder / "tests" / "test.sh").read_text() == (task / "tests" / "test.sh").read_text()
    assert unpack(good) == folder  # once per content
    zipped = tmp_path / "task.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for p in sorted(task.rglob("*")):
            z.write(p, f"packed/{p.relative_to(task)}")
    assert load_tasks(unpack(zipped))[0].name == "packed"

    def tar_with(name: str, kind=tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        return info

    for n, (info, says) in enumerate([(tar_with("../escape.txt"), "outside the folder"),
                                      (tar_with("/etc/evil"), "outside the folder"),
                                      (tar_with("t/link", tarfile.SYMTYPE, "/etc/passwd"), "a link"),
                                      (tar_with("t/dev", tarfile.CHRTYPE), "special file")]):
        bad = tmp_path / f"bad{n}.tar"
        with tarfile.open(bad, "w") as tar:
            tar.addfile(info, io.BytesIO(b""))
        with pytest.raises(ConfigError, match=says):
            unpack(bad)
    assert not (tmp_path / "escape.txt").exists()
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../../outside.txt", "x")
    with pytest.raises(ConfigError, match="outside the folder"):
        unpack(evil)
