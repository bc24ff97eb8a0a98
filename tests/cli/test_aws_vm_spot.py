"""A managed spot job on aws VMs, interrupted as EC2 interrupts: the real CLI and server, the aws
provider against an in-process moto, VMs from tests/awsvm.py. The test gives the two-minute
warning (the VM's IMDS ``spot/instance-action``, the spot request ``marked-for-termination`` in
moto's backend); the task checkpoints and exits 75, the agent's final sync puts the checkpoint in
an ``s3://`` store on the same moto; then moto terminates the instance with EC2's spot reason,
the harness kills the VM, and the job recovers on a new VM, restores from S3 and succeeds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.awsfixtures import aws_client
from tests.awsvm import AwsVms, aws_vms, vm_config, vm_image, vm_moto, vm_network, vm_user  # noqa: F401
from tests.cli.conftest import ROOT, Cli, show_job
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("awsvm")]
ACCOUNT = "123456789012"
STEPS = 80  # of 0.1 s

TASK = """name: vmspot
resources:
  accelerators: T4:1
  use_spot: true
  providers: [aws]
  regions: [us-east-1]
checkpoint:
  store: s3://{bucket}/ckpt
  sync_interval: 2s
job_recovery:
  strategy: next_region
run: |
  exec python - <<'EOF'
  import os, time, torch
  from gpulease.train import CheckpointManager, exit_preempted, on_preemption, should_stop
  net = torch.nn.Linear(4, 1)
  mgr = CheckpointManager(os.environ["GPULEASE_CHECKPOINT_DIR"], keep=2)
  step = mgr.restore(model=net) or 0
  print(f"start at step {{step}} on {{os.environ['MASTER_ADDR']}}", flush=True)
  on_preemption()
  while step < {steps}:
      step += 1
      time.sleep(0.1)
      if step % 10 == 0 or should_stop():
          mgr.save(step, model=net)
      if should_stop():
          mgr.wait()
          print(f"preempted at step {{step}}", flush=True)
          exit_preempted()
  mgr.save(step, model=net)
  mgr.wait()
  print(f"done at step {{step}}", flush=True)
  EOF
"""


def _mark_and_terminate(instance_id: str, *, terminate: bool) -> None:
    """What EC2 does to a spot instance it takes back: the request marked, then (two minutes
    later) the instance terminated with the spot reason."""
    from moto.backends import get_backend
    from moto.ec2.models.instances import StateReason

    backend = get_backend("ec2")[ACCOUNT]["us-east-1"]
    for request in backend.spot_instance_requests.values():
        if request.instance is not None and request.instance.id == instance_id:
            request._status_code = "marked-for-termination"
    if terminate:
        backend.terminate_instances([instance_id])
        code = "Server.SpotInstanceTermination"
        backend.get_instance(instance_id).state_reason = StateReason(f"{code}: taken back", code)


def _stored_steps(s3: Any, bucket: str) -> list[int]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return sorted(int(m[1]) for k in keys if (m := re.search(r"step-(\d+)/manifest\.json$", k)))


class Followed:
    """``gpulease jobs launch TASK`` as a user runs it, in the background: it follows the
    output through every attempt and exits 0 once the job succeeded."""

    def __init__(self, user: Cli, task: Path, out: Path) -> None:
        self.out = out
        env = {**os.environ, "GPULEASE_HOME": str(user.home), "COLUMNS": "200"}
        argv = [sys.executable, "-m", "gpulease", "jobs", "launch", str(task)]
        with out.open("wb") as sink:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink,
                                         stderr=subprocess.STDOUT)  # fmt: skip

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float, what: str) -> re.Match[str]:
        return wait_until(lambda: re.search(pattern, self.text()), timeout, what)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def bucket(aws_vms: AwsVms) -> tuple[Any, str]:  # noqa: F811 - fixture
    s3 = aws_client("s3", aws_vms.endpoint)
    s3.create_bucket(Bucket="gl-vm-spot")
    return s3, "gl-vm-spot"


def test_an_interrupted_spot_job_restores_from_s3_on_a_new_vm(
    user: Cli,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    bucket: tuple[Any, str],
    tmp_path: Path,
) -> None:
    s3, name = bucket
    task = tmp_path / "vmspot.yaml"
    task.write_text(TASK.format(bucket=name, steps=STEPS))
    job = Followed(user, task, tmp_path / "followed.txt")
    try:
        job.wait_for(r"start at step 0", 120, "the first attempt")
        ((first_id, first_vm),) = aws_vms.cloud.vms.items()
        wait_until(lambda: _stored_steps(s3, name) or None, 30, "a background sync to S3")

        aws_vms.cloud.notice(first_id)  # the two-minute warning, as the VM sees it
        _mark_and_terminate(first_id, terminate=False)  # and as the EC2 API says it
        step = int(job.wait_for(r"preempted at step (\d+)", 60, "exit 75")[1])
        assert 0 < step < STEPS
        wait_until(lambda: step in _stored_steps(s3, name) or None, 30, "the final sync")
        _mark_and_terminate(first_id, terminate=True)
        assert job.proc.wait(180) == 0, job.text()
    finally:
        job.stop()
    view, logs = show_job(user), job.text()
    assert view["status"] == "succeeded", (view, logs)
    assert view["recoveries"] == 1 and any(e["kind"] == "preemption" for e in view["events"])
    starts = re.findall(r"start at step (\d+) on (\S+)", logs)
    assert [int(s) for s, _ in starts] == [0, step], logs  # resumed from the S3 checkpoint
    assert starts[0][1] == first_vm.address != starts[1][1]  # on a new VM
    assert f"done at step {STEPS}" in logs
    print(f"\nspot job: {json.dumps(view['cost'])}")
