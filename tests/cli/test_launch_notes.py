"""`gpulease launch` says what of a task it does not act on — a `service:` (serve up), a
`pool:` (pool up), `resources.pool` (managed jobs only) — and the command that does."""

from __future__ import annotations

from gpulease.cli.launch_cmd import not_for_launch
from gpulease.spec import parse_task


def test_a_plain_task_has_nothing_to_say() -> None:
    assert not_for_launch(parse_task("name: t\nrun: echo hi\n")) == []


def test_a_service_a_pool_and_a_pool_job_name_their_command() -> None:
    service = parse_task("name: s\nrun: python app.py\nservice: {port: 8080, replicas: 2}\n")
    pool = parse_task("name: p\nsetup: pip install x\npool: {min_nodes: 1, max_nodes: 2}\n")
    pooled = parse_task("name: j\nrun: python t.py\nresources: {pool: trainers}\n")
    assert ["serve up" in n for n in not_for_launch(service)] == [True]
    assert ["pool up" in n for n in not_for_launch(pool)] == [True]
    (note,) = not_for_launch(pooled)
    assert note.startswith("resources.pool:") and "jobs launch" in note and "'trainers'" in note
