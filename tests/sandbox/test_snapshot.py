"""Snapshots of a live Docker sandbox: files and shell state carried into independent copies;
the temporary image removed with the last copy, or by `insandbox clean` once its owner is gone."""
from __future__ import annotations

import subprocess
import sys

from insandbox.sandbox.docker import engine
from insandbox.sandbox.docker.snapshot import LABEL_SNAPSHOT
from tests.helpers import cli

STATE = ("mkdir -p /tmp/w && cd /tmp/w && export EXPORTED='a b' && PLAIN=1 && declare -a ARR=(x 'y z') && "
         "twice() { echo $1$1; } && shopt -s expand_aliases && alias hello='echo aliased' && umask 027 && "
         "echo kept > file.txt && rm /etc/debian_version")
CHECK = ('echo "$PWD|$EXPORTED|$PLAIN|${ARR[1]}|$(twice ab)|$(umask)"; hello; cat file.txt; '
         'env | grep -c "^PLAIN="; ls /etc/debian_version 2>&1 | grep -c "No such"')


def _image_exists(image_id: str) -> bool:
    try:
        engine.api().inspect_image(image_id)
        return True
    except Exception:
        return False


def test_copies_carry_files_and_shell_state_and_stay_independent(sandbox_factory, run_async):
    async def body():
        source = await sandbox_factory()
        assert (await source.run(STATE)).exit_code == 0
        snap = await source.snapshot()
        a, b = await snap.start_copies(2)
        try:
            for copy in (a, b):
                r = await copy.run(CHECK)
                assert r.output.split("\n")[:5] == ["/tmp/w|a b|1|y z|abab|0027", "aliased", "kept", "0", "1"]
                assert r.cwd == "/tmp/w"
            await a.run("echo from-a > only-a.txt && echo changed > file.txt")
            await source.run("echo after > after-snapshot.txt")
            assert (await b.run("ls; cat file.txt")).output.split() == ["file.txt", "kept"]
            assert (await source.run("ls")).output.split() == ["after-snapshot.txt", "file.txt"]
            assert (await a.run("ls")).output.split() == ["file.txt", "only-a.txt"]
            assert a.info()["image"] == snap.tag and a.container_id != b.container_id
        finally:
            snap.acquire()  # as SandboxEnv.fork does for each branch
            snap.acquire()
            await a.close()
            await snap.release()
            assert _image_exists(snap.image)  # b still uses it
            await b.close()
            await snap.release()
        assert not _image_exists(snap.image) and snap.removed
    run_async(body())


def test_clean_removes_the_snapshot_image_of_a_process_that_is_gone(docker_image):
    code = ("import asyncio, os\n"
            "from insandbox.sandbox import SandboxSpec, create_sandbox\n"
            "async def main():\n"
            f"    sb = create_sandbox(SandboxSpec(image={docker_image!r}, run_id='snapshot-leftover'))\n"
            "    await sb.start()\n"
            "    snap = await sb.snapshot()\n"
            "    print(snap.image, flush=True)\n"
            "    os._exit(0)\n"
            "asyncio.run(main())\n")
    image = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True,
                           text=True).stdout.strip()
    try:
        assert _image_exists(image)
        assert engine.api().inspect_image(image)["Config"]["Labels"][LABEL_SNAPSHOT] == "1"
        r = cli("clean")
        assert r.returncode == 0 and "snapshot-leftover" in r.stdout and "insandbox-snapshot:" in r.stdout
        assert not _image_exists(image)
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
