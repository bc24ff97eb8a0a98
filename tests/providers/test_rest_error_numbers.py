"""slurmrestd error bodies are classified by Slurm's error number, never by their text.

No cluster: bodies of the shape slurmrestd's openapi v0.0.38 answers (``errors[]`` of
``{error_number, error, description, source}``), classified directly and through
:class:`SlurmRest` against a loopback HTTP server that answers them (virtual clock: the retries
of unavailable answers do not sleep)."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpulease.providers.slurm.rest_errors as slurm_errno
from gpulease.clock import VirtualClock
from gpulease.providers.base import CapacityError, ProviderError, ProviderUnavailable
from gpulease.providers.slurm import SlurmSettings
from gpulease.providers.slurm.commands import classify
from gpulease.providers.slurm.rest import SlurmRest
from gpulease.providers.slurm.rest_errors import CANCEL, SUBMIT, classify_errors, rest_errors
from tests.loopback import send, serving


def _body(*errors: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An answer as slurmrestd v0.0.38 writes it."""
    meta = {
        "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
    }
    return {"meta": meta, "errors": list(errors), "warnings": [], **extra}


def _error(number: int, error: str, description: str = "", source: str = "") -> dict[str, Any]:
    return {"error_number": number, "error": error, "description": description, "source": source}


NO_ROOM = _body(_error(2014, "Requested node configuration is not available",
                       "Batch job submission failed", "slurm_submit_batch_job()"))  # fmt: skip
CTLD_DOWN = _body(_error(1800, "Unable to contact slurm controller (connect failure)",
                         "slurm_load_jobs() failed", "_get_job_info"))  # fmt: skip
SOCKET_TIMEOUT = _body(_error(5004, "Socket timed out on send/recv operation", "", "_get_nodes"))
ALREADY_DONE = _body(_error(2021, "Job/step already completing or completed",
                            "unable to kill job", "_handle_job_delete"))  # fmt: skip
FORGOTTEN = _body(_error(2017, "Invalid job id specified", "unable to kill job"))
DENIED = _body(_error(2002, "Access/permission denied", "unable to kill job"))
#: texts that would mislead the commands' text rules: a node named munge-01 ("munge" reads as
#: an auth outage), a denial whose description quotes a capacity message
BUSY_MUNGE_NODES = _body(
    _error(2016, "Requested nodes are busy", "nodes munge-[01-02]: connection refused by policy")
)
DENIED_QUOTING_CAPACITY = _body(_error(2002, "Access/permission denied",
                                       "user may not use 'Requested node configuration is not "
                                       "available' partitions"))  # fmt: skip


def _classify(body: dict[str, Any], partition: str | None = None) -> Exception:
    return classify_errors("slurmrestd GET /jobs", rest_errors(body), partition=partition)


@pytest.mark.parametrize(
    ("body", "kind", "number"),
    [
        (NO_ROOM, CapacityError, 2014),
        (BUSY_MUNGE_NODES, CapacityError, 2016),
        (CTLD_DOWN, ProviderUnavailable, 1800),
        (SOCKET_TIMEOUT, ProviderUnavailable, 5004),
        (DENIED, ProviderError, 2002),
        (DENIED_QUOTING_CAPACITY, ProviderError, 2002),
        (_body(_error(2070, "Required partition not available (inactive or drain)")),
         CapacityError, 2070),
        (_body(_error(7000, "Unable to connect to database")), ProviderUnavailable, 7000),
        (_body(_error(9999, "something new")), ProviderError, 9999),
    ],
)  # fmt: skip
def test_the_number_decides(body: dict[str, Any], kind: type[Exception], number: int) -> None:
    error = _classify(body, partition="gpu")
    assert type(error) is kind
    text = body["errors"][0]["error"]
    assert str(number) in str(error) and text in str(error)  # the number and the text
    if kind is CapacityError:
        assert isinstance(error, CapacityError) and error.zone == "gpu"


def test_the_misleading_bodies_would_mislead_the_text_rules() -> None:
    """What the commands' stderr rules make of those texts: the opposite of their numbers."""
    busy, denied = (rest_errors(b)[0].text for b in (BUSY_MUNGE_NODES, DENIED_QUOTING_CAPACITY))
    assert type(classify("x", busy)) is ProviderUnavailable  # the number says CapacityError
    assert type(classify("x", denied)) is CapacityError  # the number says ProviderError


def test_messages_name_the_number_slurm_uses() -> None:
    error = _classify(NO_ROOM)
    assert str(error) == (
        "slurmrestd GET /jobs: Requested node configuration is not available: Batch job "
        "submission failed (Slurm error 2014 ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)"
    )


@given(
    st.sampled_from(sorted(slurm_errno.NO_ROOM | slurm_errno.UNREACHABLE | {2002, 2050, 9001})),
    st.text(),
)
def test_any_text_with_a_number_is_classified_by_the_number(number: int, text: str) -> None:
    error = _classify(_body(_error(number, text, text)))
    expected = (
        ProviderUnavailable if number in slurm_errno.UNREACHABLE
        else CapacityError if number in slurm_errno.NO_ROOM
        else ProviderError
    )  # fmt: skip
    assert type(error) is expected


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ({"error": "Requested node configuration is not available"}, CapacityError),
        ({"error_number": -1, "error": "Unable to contact slurm controller"}, ProviderUnavailable),
        ({"error_number": 0, "description": "zero bytes were transmitted"}, ProviderUnavailable),
        ({"error_number": "2014", "error": "odd"}, ProviderError),  # not a number: the text
    ],
)
def test_without_a_number_the_text_rules_apply(entry: dict[str, Any], kind: type) -> None:
    assert type(_classify(_body(entry))) is kind


def test_unreachable_wins_over_no_room_over_the_rest() -> None:
    both = _body(DENIED["errors"][0], NO_ROOM["errors"][0], CTLD_DOWN["errors"][0])
    error = _classify(both)
    assert type(error) is ProviderUnavailable
    assert all(n in str(error) for n in ("2002", "2014", "1800"))
    assert type(_classify(_body(DENIED["errors"][0], NO_ROOM["errors"][0]))) is CapacityError


def test_what_a_call_accepts() -> None:
    for body in (ALREADY_DONE, FORGOTTEN):
        assert all(CANCEL.covers(e) for e in rest_errors(body))
    assert not any(CANCEL.covers(e) for e in rest_errors(DENIED))
    assert all(CANCEL.covers(e) for e in rest_errors(_body({"error": "Invalid job id specified"})))
    queued = _body(_error(2015, "Requested partition configuration not available now"))
    assert all(SUBMIT.covers(e) for e in rest_errors(queued))
    assert not any(SUBMIT.covers(e) for e in rest_errors(NO_ROOM))


def test_entries_that_say_nothing_are_skipped() -> None:
    body = {"errors": [None, "text", {}, {"error_number": 0, "error": ""}, _error(2014, "x")]}
    assert rest_errors(body) == [slurm_errno.RestError(2014, "x")]


# ---- through SlurmRest, over HTTP ------------------------------------------------------------


class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's ``answer`` (status, body); records the paths."""

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        server: Any = self.server
        server.paths.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        status, body = server.answer
        send(self, status, body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()


@pytest.fixture
def slurmrestd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("SLURM_JWT", "jwt-for-the-test")
    with serving(_Answers) as httpd:
        httpd.answer, httpd.paths = (200, _body()), []
        yield httpd


def _rest(httpd: Any) -> SlurmRest:
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    settings = SlurmSettings.from_mapping({"rest_url": url})
    return SlurmRest(settings, attempts=3, retry_base=0.0, clock=VirtualClock())


def test_cancel_of_a_finished_job_is_done_and_other_refusals_are_errors(slurmrestd: Any) -> None:
    rest = _rest(slurmrestd)
    for body in (ALREADY_DONE, FORGOTTEN):
        slurmrestd.answer = (500, body)
        rest.cancel(["41"])
    slurmrestd.answer = (500, DENIED)
    with pytest.raises(ProviderError, match="2002") as info:
        rest.cancel(["42"])
    assert type(info.value) is ProviderError
    assert slurmrestd.paths[-1] == "DELETE /slurm/v0.0.38/job/42"


def test_a_misleading_text_does_not_make_a_busy_partition_an_outage(slurmrestd: Any) -> None:
    rest = _rest(slurmrestd)
    slurmrestd.answer = (500, BUSY_MUNGE_NODES)
    with pytest.raises(CapacityError, match="ESLURM_NODES_BUSY"):
        rest.request("POST", "/job/submit", body={"script": "#!/bin/sh\n"}, partition="gpu")
    assert len(slurmrestd.paths) == 3  # CapacityError is Retryable: tried `attempts` times


def test_an_unreachable_controller_is_retried_then_unavailable(slurmrestd: Any) -> None:
    rest = _rest(slurmrestd)
    slurmrestd.answer = (500, CTLD_DOWN)
    with pytest.raises(ProviderUnavailable, match="1800"):
        rest.jobs()
    assert slurmrestd.paths == ["GET /slurm/v0.0.38/jobs"] * 3


def test_a_submit_queued_behind_a_busy_partition_returns_its_job(slurmrestd: Any) -> None:
    rest = _rest(slurmrestd)
    queued = _body(_error(2015, "Requested partition configuration not available now"),
                   job_id=77, step_id="batch")  # fmt: skip
    slurmrestd.answer = (200, queued)
    answer = rest.request("POST", "/job/submit", body={"script": "x"}, accept=SUBMIT)
    assert answer["job_id"] == 77
