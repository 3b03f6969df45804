"""The persistent copy of a run dir: complete checkpoints only, markers last, restore, a watcher."""

import os
import signal
import subprocess
import sys
import time

import pytest

from olmocr.utils import sync


def write(path, text="x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def run_dir(root):
    write(f"{root}/metrics.jsonl", "step 1\n")
    write(f"{root}/checkpoints/step_000002/model/model.safetensors", "weights-2")
    write(f"{root}/checkpoints/step_000002/trainer_state.pt", "state-2")
    write(f"{root}/checkpoints/step_000004.partial/model/model.safetensors", "staging")  # being written
    write(f"{root}/checkpoints/checkpoint-6/model.safetensors", "weights-6")  # no marker yet
    return root


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_push_takes_complete_checkpoints_marker_last(tmp_path, monkeypatch):
    src, dst = run_dir(str(tmp_path / "run")), str(tmp_path / "copy")
    order = []
    real = sync.filesystem

    def recording(path):
        fs = real(path)
        if not getattr(fs, "recording", False):  # fsspec hands out one cached instance: wrap it once
            put = fs.put_file
            monkeypatch.setattr(fs, "put_file", lambda lpath, rpath, **kw: (
                order.append(os.path.relpath(rpath, dst)), put(lpath, rpath, **kw)), raising=False)
            monkeypatch.setattr(fs, "recording", True, raising=False)
        return fs

    monkeypatch.setattr(sync, "filesystem", recording)
    assert sync.push(src, dst) == (3, 0)
    assert files(dst) == ["checkpoints/step_000002/model/model.safetensors", "checkpoints/step_000002/trainer_state.pt",
                          "metrics.jsonl"]
    assert order.index("checkpoints/step_000002/trainer_state.pt") > order.index(
        "checkpoints/step_000002/model/model.safetensors")
    # A complete checkpoint there is not sent again; a grown file is; a newly complete one goes, marker last.
    write(f"{src}/checkpoints/step_000002/model/model.safetensors", "changed locally")
    write(f"{src}/metrics.jsonl", "step 1\nstep 2\n")
    write(f"{src}/checkpoints/checkpoint-6/trainer_state.json", "{}")
    order.clear()
    assert sync.push(src, dst) == (3, 2)
    assert order == ["metrics.jsonl", "checkpoints/checkpoint-6/model.safetensors",
                     "checkpoints/checkpoint-6/trainer_state.json"]
    assert open(f"{dst}/checkpoints/step_000002/model/model.safetensors").read() == "weights-2"
    # keep_last pruned a checkpoint here: it goes there too
    import shutil

    shutil.rmtree(f"{src}/checkpoints/step_000002")
    sync.push(src, dst)
    assert not os.path.exists(f"{dst}/checkpoints/step_000002")


def test_pull_restores_complete_checkpoints_only(tmp_path):
    remote = str(tmp_path / "remote")
    write(f"{remote}/metrics.jsonl", "step 1\n")
    write(f"{remote}/checkpoints/step_000002/model/model.safetensors", "weights-2")
    write(f"{remote}/checkpoints/step_000002/trainer_state.pt", "state-2")
    write(f"{remote}/checkpoints/step_000004/model/model.safetensors", "cut short")  # the upload was killed
    local = str(tmp_path / "new_machine")
    assert sync.pull(remote, local) == (3, 0)
    assert files(local) == ["checkpoints/step_000002/model/model.safetensors", "checkpoints/step_000002/trainer_state.pt",
                            "metrics.jsonl"]
    assert sync.pull(remote, local) == (0, 3)  # already here
    assert sync.pull(str(tmp_path / "nothing_yet"), str(tmp_path / "fresh")) == (0, 0)  # a first run


def test_round_trip_through_s3(tmp_path, s3_server):
    import boto3

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="runs")
    src = run_dir(str(tmp_path / "run"))
    sync.push(src, "s3://runs/a/b")
    restored = str(tmp_path / "restored")
    sync.pull("s3://runs/a/b", restored)
    assert files(restored) == ["checkpoints/step_000002/model/model.safetensors",
                               "checkpoints/step_000002/trainer_state.pt", "metrics.jsonl"]


def test_check_writes_and_removes_one_object_and_a_refused_write_is_one_line(tmp_path, s3_server, monkeypatch,
                                                                              capsys):
    """Credentials that read but do not write: a pull works, the check a job makes before its stage does not."""
    import boto3

    from support.faultproxy import FaultProxy

    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket="runs")
    sync.push(run_dir(str(tmp_path / "run")), "s3://runs/exp")
    before = {o["Key"] for o in client.list_objects_v2(Bucket="runs")["Contents"]}
    assert sync.main(["check", "s3://runs/exp"]) == 0
    assert {o["Key"] for o in client.list_objects_v2(Bucket="runs")["Contents"]} == before
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("PUT", "POST", "DELETE")) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        assert sync.main(["pull", "s3://runs/exp", str(tmp_path / "restored")]) == 0
        capsys.readouterr()
        assert sync.main(["check", "s3://runs/exp"]) == 1
    assert capsys.readouterr().err == ("error: cannot write to s3://runs/exp (and remove what was written): "
                                       "s3://runs/exp/.olmocr_sync_check: the storage refused the credentials "
                                       "(PermissionError: Access Denied)\n")
    assert sync.main(["check", "s3://runs/exp", str(tmp_path)]) == 1
    assert sync.main(["push", str(tmp_path)]) == 1


@pytest.mark.integration
def test_pull_and_check_wait_out_storage_that_stops_answering(tmp_path, s3_server, monkeypatch, capsys):
    """A job coming back in a brownout (the client's own retries off): its restore and its write check wait and
    succeed, where they ended the task; past --wait-s, one line naming the place."""
    import boto3

    from support.faultproxy import FaultProxy

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="runs")
    sync.push(run_dir(str(tmp_path / "run")), "s3://runs/exp")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        proxy.outage_when("GET", r"/runs\?list-type=2", 1)
        proxy.outage_when("GET", r"/runs/exp/checkpoints/step_000002/model/model\.safetensors", 1)
        proxy.outage_when("PUT", r"/runs/exp/\.olmocr_sync_check", 1)
        assert sync.main(["pull", "s3://runs/exp", str(tmp_path / "restored"), "--wait-s", "60"]) == 0
        assert sync.main(["check", "s3://runs/exp", "--wait-s", "60"]) == 0
        assert proxy.counts["outage", "GET"] >= 2 and proxy.counts["outage", "PUT"]
        assert files(str(tmp_path / "restored")) == ["checkpoints/step_000002/model/model.safetensors",
                                                     "checkpoints/step_000002/trainer_state.pt", "metrics.jsonl"]
        capsys.readouterr()
        proxy.outage(600)
        assert sync.main(["pull", "s3://runs/exp", str(tmp_path / "again"), "--wait-s", "1"]) == 1
        proxy.outage(0)
    # Only our line is asserted: the client's own threads may log beside it (a logging error, when an earlier
    # test of this process left a handler on a stream since closed).
    assert any(line.startswith("error: s3://runs/exp: the storage did not answer for ")
               for line in capsys.readouterr().err.splitlines())


def test_watcher_pushes_until_stopped_and_once_more(tmp_path):
    src, dst = str(tmp_path / "run"), str(tmp_path / "copy")
    write(f"{src}/metrics.jsonl", "step 1\n")
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.utils.sync", "push", src, dst, "--every", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{dst}/metrics.jsonl"):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    write(f"{src}/last.txt", "written just before the end")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert os.path.exists(f"{dst}/last.txt") and "copied" in out


def test_bad_arguments():
    with pytest.raises(SystemExit):
        sync.main(["sideways", "a", "b"])
    assert sync.main(["pull", "a", "b", "--every", "1"]) == 1
    assert sync.main(["push", "/no/such/run", "/tmp/x"]) == 1
