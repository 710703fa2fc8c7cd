"""The ``atomq`` command as a newcomer runs it: a real process on the embedded Valkey."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from atomq.client import AtomqClient
from atomq.errors import Unauthorized
from atomq.platform.store import keys as k
from atomq.platform.watch.nodes import NodeRecord
from support.served_node import AtomqServe, Http, ServeFactory
from support.waiting import wait_until

ATOMQ = [sys.executable, "-m", "atomq"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ATOMQ, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def succeeding(env: dict[str, str]) -> Callable[..., str]:
    """``run`` with ``env`` that asserts the command succeeded and gives its output."""
    def ok(*args: str) -> str:
        result = run(*args, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout
    return ok


def test_selftest_sends_gets_acks_and_dead_letters_on_the_embedded_server(tmp_path: Path) -> None:
    result = run("selftest", "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "sent 3 messages in one batch" in out
    assert "acked 2" in out
    assert "delivery_count 2, redelivered True" in out
    assert "dead-lettered with reason 'selftest failure' after 2 failed deliveries" in out
    assert "queue 'orders': depth 0, in flight 0, dead letters 1" in out
    assert out.rstrip().endswith("selftest passed.")
    assert (tmp_path / "data" / "valkey" / "valkey.conf").exists(), "kept the data dir it was given"


def test_audit_reports_a_consistent_data_dir_and_repairs_usage_counters(tmp_path: Path) -> None:
    from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
    from atomq.platform.store.embedded import EmbeddedValkey

    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    try:
        client = server.client()
        qs = QueueServer(client)
        qs.put_queue("t_audited", "q", "point_to_point")
        qs.send("t_audited", "q", [OutgoingMessage(documents=(OutgoingDocument("kept"),))])
        client.hset("aq:{t_audited}:usage", "bytes", 999_999)  # counters knocked out of step
    finally:
        server.stop()
    broken = run("audit", "--data-dir", str(tmp_path))
    assert broken.returncode == 1 and "usage counters say" in broken.stdout
    as_json = run("audit", "--data-dir", str(tmp_path), "--json")
    assert as_json.returncode == 1, as_json.stderr
    report = json.loads(as_json.stdout)
    (entry,) = report["tenants"]
    assert entry["tenant"] == "t_audited" and report["problems"] == len(entry["problems"]) > 0
    assert any("usage counters say" in p for p in entry["problems"])
    repaired = run("audit", "--data-dir", str(tmp_path), "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "t_audited: usage set to" in repaired.stdout and "t_audited: consistent" in repaired.stdout
    again = json.loads(run("audit", "--data-dir", str(tmp_path), "--repair", "--json").stdout)
    assert again["problems"] == 0 and again["tenants"][0]["problems"] == []
    assert again["tenants"][0]["repaired"]["messages"] >= 1


def test_help_explains_each_command() -> None:
    result = run("selftest", "--help")
    assert result.returncode == 0
    assert "ATOMQ_DATA_DIR" in result.stdout


def test_help_offers_only_the_options_that_apply_and_says_what_limits_mean() -> None:
    from click.testing import CliRunner

    from atomq.cli import main

    runner = CliRunner()

    def help_of(*command: str) -> str:
        result = runner.invoke(main, [*command, "--help"])
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())  # as one line: click wraps the help to the terminal

    for owner_only in (("tenants", "create"), ("tenants", "update"), ("tenants", "list"), ("server", "show"),
                       ("server", "update"), ("server", "nodes"), ("server", "top")):
        shown = help_of(*owner_only)
        assert "--tenant" not in shown and "ATOMQ_TENANT" not in shown, owner_only
        assert "--key" in shown and "--json" in shown, owner_only
    refused = runner.invoke(main, ["tenants", "list", "--tenant", "acme"])
    assert refused.exit_code == 2 and "--tenant" in refused.output
    assert "--tenant" in help_of("queues", "list"), "commands on a tenant's queues still take it"
    for command in (("tenants", "create"), ("tenants", "update")):
        shown = help_of(*command)
        rate = shown.split("--rate-limit-per-minute")[1].split("--disk-quota-bytes")[0]
        quota = shown.split("--disk-quota-bytes")[1].split("--spark-weight")[0]
        assert "rate-limit window" in rate and "429" in rate and "0: no limit" in rate, rate
        assert "refused whole" in quota and "0: no limit" in quota, quota
    moves = help_of("queues", "moves", "start")
    assert "back to the queue it left as a dead letter" in moves and "(1 to 500)" in moves
    assert "cancel" in help_of("queues", "moves") and "redrive" in help_of("queues", "moves")
    got = help_of("get")
    assert "Most messages to receive (1 to 1000)" in got and "0: answer at once" in got


def test_without_a_key_outside_a_data_directory_the_error_says_where_it_looked(tmp_path: Path) -> None:
    unset = {**os.environ, "ATOMQ_KEY": "", "ATOMQ_DATA_DIR": ""}  # click reads an empty variable as unset
    looked = tmp_path.resolve() / "atomq-data" / "owner.key"
    plain, as_json = (subprocess.run([*ATOMQ, "queues", "list", *flags], cwd=tmp_path, env=unset,
                                     capture_output=True, text=True, timeout=60) for flags in ((), ("--json",)))
    assert plain.returncode == 2 and f"{looked} does not exist" in plain.stderr, plain.stderr
    for way_out in ("--key", "ATOMQ_KEY", "--data-dir", "ATOMQ_DATA_DIR", "--url"):
        assert way_out in plain.stderr, way_out
    assert as_json.returncode == 2 and as_json.stdout == ""
    error = json.loads(as_json.stderr)["error"]
    assert (error["code"], error["details"]) == ("no_key", {"owner_key_file": str(looked)})


def test_serve_settings_come_from_file_then_environment_then_flags(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    import atomq.node.lifecycle
    from atomq.cli import main

    seen = []
    monkeypatch.setattr(atomq.node.lifecycle, "serve", seen.append)
    config = tmp_path / "atomq.toml"
    config.write_text('[serve]\nport = 7001\nthreads = 7\nhttp-workers = 3\nhost = "0.0.0.0"\n')
    runner = CliRunner()
    result = runner.invoke(main, ["--config", str(config), "serve", "--threads", "9"],
                           env={"ATOMQ_HTTP_WORKERS": "4", "ATOMQ_THREADS": "8"})
    assert result.exit_code == 0, result.output
    (node,) = seen
    assert (node.port, node.host) == (7001, "0.0.0.0"), "from the file"
    assert node.http_workers == 4, "the environment beats the file"
    assert node.threads == 9, "a flag beats both"
    bad = runner.invoke(main, ["serve", "--port", "0"])
    assert bad.exit_code == 2 and "--port" in bad.output


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    """A real ``atomq serve``, shared by the tests that manage listeners through the command."""
    return serve_for_module(http_workers=1)


@pytest.fixture
def tenant_env(node: AtomqServe) -> Iterator[dict[str, str]]:
    """The environment of a fresh tenant's CLI calls: the node's URL and the tenant's key."""
    with AtomqClient(node.url, node.owner_key) as owner:
        tenant = owner.create_tenant(f"cli-{secrets.token_hex(4)}")
        yield {"ATOMQ_URL": node.url, "ATOMQ_KEY": tenant["api_key"], "ATOMQ_TENANT": ""}
        owner.delete_tenant(tenant["id"])


def test_listeners_are_deployed_listed_paused_resumed_and_deleted(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    ok("queues", "create", "incoming")
    ok("queues", "create", "results")
    deployed = ok("listeners", "deploy", "fwd", "--queue", "incoming", "--process", "forward",
                  "--setting", "to=results", "--engine", "fork")
    assert "fwd" in deployed and "running" in deployed
    no_engine = run("listeners", "deploy", "gpu", "--queue", "incoming", "--process", "forward",
                    "--setting", "to=results", "--engine", "gpu", env=tenant_env)
    assert no_engine.returncode == 2 and "'fork', 'spark'" in no_engine.stderr

    header, *rows = ok("listeners", "list").splitlines()
    assert header.split() == ["NAME", "QUEUE", "PROCESS", "STATE", "EXECUTIONS", "FAILURES", "LAST", "ERROR"]
    assert [row.split() for row in rows] == [["fwd", "incoming", "forward", "running", "0", "0"]]
    (listener,) = json.loads(ok("listeners", "list", "--json"))
    assert listener["name"] == "fwd" and listener["queue"] == "incoming" and listener["process"] == "forward"
    assert listener["settings"] == {"to": "results"} and listener["subscriber"] is None
    assert listener["batch_size"] == 10 and listener["state"] == "running" and listener["engine"] == "fork"

    assert json.loads(ok("listeners", "pause", "fwd", "--json"))["state"] == "paused"
    assert json.loads(ok("listeners", "show", "fwd", "--json"))["state"] == "paused"
    assert "paused" in ok("listeners", "list")
    redeployed = json.loads(ok("listeners", "deploy", "fwd", "--queue", "incoming", "--process", "forward",
                               "--settings-json", '{"to": "elsewhere"}', "--setting", "to=results",
                               "--batch-size", "5", "--json"))
    assert redeployed["settings"] == {"to": "results"} and redeployed["batch_size"] == 5
    assert redeployed["state"] == "paused", "a redeploy keeps the state"
    assert json.loads(ok("listeners", "resume", "fwd", "--json"))["state"] == "running"
    assert "running" in ok("listeners", "show", "fwd")

    assert "fwd" in ok("listeners", "delete", "fwd")
    assert json.loads(ok("listeners", "list", "--json")) == []
    missing = run("listeners", "show", "fwd", env=tenant_env)
    assert missing.returncode == 1 and "not_found" in missing.stderr


def test_deploying_an_unregistered_process_fails_naming_process(tenant_env: dict[str, str]) -> None:
    assert run("queues", "create", "incoming", env=tenant_env).returncode == 0
    result = run("listeners", "deploy", "bad", "--queue", "incoming", "--process", "no-such-process",
                 "--setting", "to=results", env=tenant_env)
    assert result.returncode != 0
    assert "process" in result.stderr and "no-such-process" in result.stderr, result.stderr
    listed = run("listeners", "list", "--json", env=tenant_env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    bad_setting = run("listeners", "deploy", "bad", "--queue", "incoming", "--process", "forward",
                      "--setting", "to", env=tenant_env)
    assert bad_setting.returncode == 2 and "--setting" in bad_setting.stderr


def test_listeners_help_explains_the_commands() -> None:
    result = run("listeners", "deploy", "--help")
    assert result.returncode == 0
    for option in ("--queue", "--process", "--subscriber", "--batch-size", "--max-concurrent", "--setting",
                   "--settings-json", "ATOMQ_KEY"):
        assert option in result.stdout


def test_with_json_a_failure_is_the_apis_error_json_on_standard_error(tenant_env: dict[str, str]) -> None:
    missing = run("queues", "show", "nowhere", "--json", env=tenant_env)
    assert missing.returncode == 1 and missing.stdout == ""
    with Http(tenant_env["ATOMQ_URL"], tenant_env["ATOMQ_KEY"]) as api:
        assert json.loads(missing.stderr) == api("GET", "/v1/queues/nowhere", status=404), "the node's own answer"
    refused = json.loads(run("queues", "create", "q", "--max-bytes", "-1", "--json", env=tenant_env).stderr)
    assert refused["error"]["code"] == "invalid_usage" and "--max-bytes" in refused["error"]["message"]
    assert refused["error"]["details"] == {"command": "python -m atomq queues create"}
    succeeding(tenant_env)("queues", "create", "jobs")
    unmatched = run("ack", "jobs", "1795461670403-000000000002", "--json", env=tenant_env)
    assert unmatched.returncode == 1 and json.loads(unmatched.stdout) == {"acked": 0}, "the result first"
    assert json.loads(unmatched.stderr)["error"] == {
        "code": "not_found", "message": "1 of the 1 ids matched nothing (0 acked)",
        "details": {"asked": 1, "matched": 0}}
    plain = run("queues", "show", "nowhere", env=tenant_env)
    assert plain.returncode == 1 and plain.stderr.startswith("Error: not_found: "), "people read text"
    literal = run("send", "jobs", "--", "--json", env=tenant_env)
    assert literal.returncode == 0 and not literal.stdout.startswith("{"), "after --, --json is a text to send"


def test_publish_reaches_the_queues_that_attract_the_topic_with_their_priorities(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    created = json.loads(ok("queues", "create", "input", "--topic", "boomi/test/>", "--message-ttl", "60",
                            "--on-expire", "discard", "--json"))
    assert (created["topics"], created["message_ttl_s"], created["on_expire"]) == (["boomi/test/>"], 60, "discard")
    ok("queues", "create", "other", "--topic", "elsewhere/>")
    published = json.loads(ok("publish", "boomi/test/1", "plain", "--json"))
    assert published["queues"] == ["input"] and len(published["ids"]) == 1
    ok("send", "input", "urgent", "--priority", "9", "--ttl", "30")
    got = json.loads(ok("get", "input", "--max", "5", "--ack", "--json"))
    assert [(m["documents"][0]["data"], m["priority"], m["topic"]) for m in got] == [
        ("urgent", 9, None), ("plain", 4, "boomi/test/1")]
    kept = json.loads(ok("queues", "create", "input", "--json"))
    assert kept["topics"] == ["boomi/test/>"], "a create that names no topic keeps the patterns"
    bad = run("publish", "boomi/*", "x", env=tenant_env)
    assert bad.returncode != 0 and "topic" in bad.stderr


def test_dead_letters_are_listed_resent_and_deleted_by_reason(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    ok("queues", "create", "jobs", "--max-redeliveries", "0")
    ok("send", "jobs", "late", "--ttl", "0.001")
    ok("send", "jobs", "broken")
    (got,) = json.loads(ok("get", "jobs", "--max", "5", "--nack", "bad input", "--json"))
    assert got["documents"][0]["data"] == "broken", "the expired one is never delivered"
    expired = json.loads(ok("dead-letters", "list", "jobs", "--reason", "expired", "--json"))
    assert [m["reason"] for m in expired] == ["expired"]
    assert "bad input" in ok("dead-letters", "list", "jobs")
    assert ok("dead-letters", "reasons", "jobs").splitlines() == ["COUNT  REASON", "1      bad input", "1      expired"]
    both = run("dead-letters", "resend", "jobs", got["id"], "--reason", "expired", env=tenant_env)
    assert both.returncode == 2 and "not both" in both.stderr
    misspelt = run("dead-letters", "resend", "jobs", "--reason", "expird", env=tenant_env)
    assert misspelt.returncode == 1 and "RESENT" in misspelt.stdout, "the result is printed first"
    assert ("no dead letter of jobs has the reason 'expird' (0 resent); the reasons present: 'bad input', "
            "'expired'") in misspelt.stderr
    misspelt = run("dead-letters", "delete", "jobs", "--reason", "bad inptu", "--yes", "--json", env=tenant_env)
    assert misspelt.returncode == 1 and json.loads(misspelt.stdout) == {"deleted": 0}
    error = json.loads(misspelt.stderr)["error"]
    assert (error["code"], error["details"]) == (
        "not_found", {"reason": "bad inptu", "reasons_present": ["bad input", "expired"]})
    assert json.loads(ok("dead-letters", "resend", "jobs", "--reason", "expired", "--json")) == {"resent": 1}
    unconfirmed = run("dead-letters", "delete", "jobs", "--reason", "bad input", env=tenant_env)
    assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr, "no terminal to ask on"
    assert json.loads(ok("dead-letters", "delete", "jobs", "--reason", "bad input", "--yes", "--json")) == {"deleted": 1}
    assert json.loads(ok("dead-letters", "list", "jobs", "--json")) == []
    none_left = run("dead-letters", "resend", "jobs", "--reason", "expired", env=tenant_env)
    assert none_left.returncode == 1 and "it has no dead letters" in none_left.stderr


def test_a_last_value_queue_keeps_the_newest_message_of_each_key(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    created = json.loads(ok("queues", "create", "prices", "--last-value", "--last-value-key", "sku", "--json"))
    assert (created["last_value"], created["last_value_key"]) == (True, "sku")
    ok("send", "prices", "apple 1", "--property", "sku=apple")
    ok("send", "prices", "pear 1", "--property", "sku=pear")
    ok("send", "prices", "apple 2", "--property", "sku=apple")
    browsed = json.loads(ok("browse", "prices", "--json"))
    assert [(m["properties"], m["documents"][0]["data"]) for m in browsed] == [
        ({"sku": "pear"}, "pear 1"), ({"sku": "apple"}, "apple 2")]
    assert json.loads(ok("browse", "prices", "--json")) == browsed, "browsing consumes nothing"
    assert json.loads(ok("queues", "create", "prices", "--json"))["totals"]["superseded"] == 1
    bad = run("send", "prices", "x", "--property", "nosign", env=tenant_env)
    assert bad.returncode == 2 and "NAME=VALUE" in bad.stderr


def test_an_exclusive_queue_serves_one_consumer_at_a_time(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    created = json.loads(ok("queues", "create", "input", "--access", "exclusive", "--json"))
    assert created["access"] == "exclusive"
    ok("send", "input", "first", "second")
    got = json.loads(ok("get", "input", "--consumer", "one", "--max", "1", "--json"))
    assert [m["documents"][0]["data"] for m in got] == ["first"]
    standby = run("get", "input", "--consumer", "two", "--json", env=tenant_env)
    assert standby.returncode == 0 and json.loads(standby.stdout) == []
    assert "two is a standby consumer of input" in standby.stderr
    shown = ok("queues", "show", "input")
    assert "consumer.one" in shown and "active" in shown and "consumer.two" in shown and "standby" in shown
    missing = run("get", "input", env=tenant_env)
    assert missing.returncode != 0 and "consumer" in missing.stderr


def test_a_queues_dead_letters_move_to_the_queue_it_names(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "parked")
    made = json.loads(ok("queues", "create", "jobs", "--max-redeliveries", "0", "--dead-letter-queue", "parked",
                         "--json"))
    assert made["dead_letter_queue"] == "parked"
    assert "parked" in ok("queues", "show", "jobs")
    ok("send", "jobs", "work")
    got = json.loads(ok("get", "jobs", "--json"))
    ok("nack", "jobs", got[0]["id"], "--reason", "boom")
    [moved] = json.loads(ok("get", "parked", "--json"))
    assert moved["properties"]["dead_letter_reason"] == "boom" and moved["properties"]["dead_letter_source"] == "jobs"
    refused = run("queues", "create", "jobs", "--dead-letter-queue", "nowhere", env=tenant_env)
    assert refused.returncode != 0 and "does not exist" in refused.stderr
    assert json.loads(ok("queues", "create", "jobs", "--dead-letter-queue", "", "--json"))["dead_letter_queue"] == ""


def test_a_dead_letter_queue_is_moved_cancelled_and_moved_back_by_move_tasks(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "parked")
    ok("queues", "create", "retry")
    ok("queues", "create", "jobs", "--max-redeliveries", "0", "--dead-letter-queue", "parked")
    ok("send", "jobs", *[f"m{i}" for i in range(30)])
    got = json.loads(ok("get", "jobs", "--max", "30", "--json"))
    ok("nack", "jobs", *[m["id"] for m in got])
    # At one a second, 30 messages take 29 seconds at least: the task still runs when cancelled.
    task = json.loads(ok("queues", "moves", "start", "parked", "--to", "retry", "--per-second", "1", "--json"))
    assert (task["status"], task["to_move"], task["destination"]) == ("running", 30, "retry")
    assert task["id"] in ok("queues", "moves", "list", "parked") and "running" in ok("queues", "moves", "list",
                                                                                      "parked")
    busy = run("queues", "moves", "start", "parked", env=tenant_env)
    assert busy.returncode == 1 and "is running" in busy.stderr
    cancelled = json.loads(ok("queues", "moves", "cancel", "parked", task["id"], "--json"))
    assert cancelled["status"] == "cancelled" and cancelled["moved"] < 30
    depths = {q: json.loads(ok("queues", "show", q, "--json"))["depth"] for q in ("parked", "retry")}
    assert depths == {"parked": 30 - cancelled["moved"], "retry": cancelled["moved"]}, "nothing lost, none after"
    back = json.loads(ok("queues", "moves", "start", "parked", "--json"))
    assert back["destination"] is None

    def finished() -> bool:
        return json.loads(ok("queues", "moves", "list", "parked", "--json"))[0]["status"] == "completed"
    wait_until(finished, 30, "the move back to the sources to complete")
    assert json.loads(ok("queues", "show", "jobs", "--json"))["depth"] == 30 - cancelled["moved"]
    assert [t["id"] for t in json.loads(ok("queues", "moves", "list", "parked", "--json"))] == [back["id"], task["id"]]
    bad = run("queues", "moves", "start", "parked", "--per-second", "0", env=tenant_env)
    assert bad.returncode == 2 and "--per-second" in bad.stderr


def test_a_queue_ordered_by_group_holds_each_group_while_one_of_it_is_out(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    assert json.loads(ok("queues", "create", "payments", "--ordering", "group", "--json"))["ordering"] == "group"
    assert "ordering" in ok("queues", "show", "payments")
    ok("send", "payments", "open", "debit", "--group", "acct-17")
    ok("send", "payments", "open", "--group", "acct-42")
    browsed = ok("browse", "payments")
    assert "GROUP" in browsed and "acct-17" in browsed
    got = json.loads(ok("get", "payments", "--max", "10", "--ack", "--json"))
    assert [(m["documents"][0]["data"], m["group"]) for m in got] == [("open", "acct-17"), ("open", "acct-42")]
    assert [m["documents"][0]["data"] for m in json.loads(ok("get", "payments", "--max", "10", "--json"))] == [
        "debit"]
    bad = run("send", "payments", "x", "--group", "with space", env=tenant_env)
    assert bad.returncode != 0 and "group" in bad.stderr


def test_a_queues_limits_are_set_shown_and_met(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)

    created = json.loads(ok("queues", "create", "bounded", "--max-messages", "2", "--overflow", "drop_oldest",
                            "--overflow-to-dead-letters", "--max-message-bytes", "100", "--json"))
    assert (created["max_messages"], created["overflow"], created["overflow_to_dead_letters"]) == (
        2, "drop_oldest", True)
    ok("send", "bounded", "a", "b")
    dropping = run("send", "bounded", "c", "--json", env=tenant_env)
    assert dropping.returncode == 0 and json.loads(dropping.stdout)["dropped"] == 1
    assert "dropped 1 waiting messages to make room" in dropping.stderr
    assert [d["reason"] for d in json.loads(ok("dead-letters", "list", "bounded", "--json"))] == ["overflow"]
    shown = ok("queues", "show", "bounded")
    assert "max_messages" in shown and "drop_oldest" in shown and "held_bytes" in shown
    ok("queues", "create", "bounded", "--overflow", "reject_new")
    full = run("send", "bounded", "d", env=tenant_env)
    assert full.returncode != 0 and "holds at most 2 messages" in full.stderr
    too_big = run("send", "bounded", "x" * 200, env=tenant_env)
    assert too_big.returncode != 0 and "max_message_bytes" in too_big.stderr
    bad = run("queues", "create", "bounded", "--overflow", "drop_newest", env=tenant_env)
    assert bad.returncode == 2 and "drop_newest" in bad.stderr
    assert json.loads(ok("queues", "create", "ledger", "--durability", "sync", "--json"))["durability"] == "sync"
    assert json.loads(ok("send", "ledger", "synced", "--json"))["ids"]


def test_the_owner_manages_tenants_by_name_and_confirms_what_cannot_be_undone(node: AtomqServe) -> None:
    owner_env = {"ATOMQ_URL": node.url, "ATOMQ_KEY": node.owner_key, "ATOMQ_TENANT": ""}
    ok = succeeding(owner_env)
    name = f"cli-named-{secrets.token_hex(3)}"
    created = json.loads(ok("tenants", "create", name, "--json"))
    taken = run("tenants", "create", name, env=owner_env)
    assert taken.returncode == 1 and "name_taken" in taken.stderr
    assert json.loads(ok("tenants", "show", name, "--json"))["id"] == created["id"]
    ok("queues", "create", "jobs", "--tenant", name)
    assert [q["name"] for q in json.loads(ok("queues", "list", "--tenant", name, "--json"))] == ["jobs"]
    unnamed = run("queues", "list", env=owner_env)
    assert unnamed.returncode == 2 and "pass --tenant" in unnamed.stderr and "header" not in unnamed.stderr
    nobody = run("queues", "list", "--tenant", "nobody-has-this-name", env=owner_env)
    assert nobody.returncode == 2 and "no tenant has the id or name" in nobody.stderr
    renamed = json.loads(ok("tenants", "update", name, "--name", f"{name}-2", "--spark-weight", "3", "--json"))
    assert (renamed["name"], renamed["spark_weight"]) == (f"{name}-2", 3)

    rotated = json.loads(ok("tenants", "rotate-key", f"{name}-2", created["key_id"], "--yes", "--json"))
    assert rotated["revoked"] == created["key_id"]
    with AtomqClient(node.url, rotated["api_key"]) as new, AtomqClient(node.url, created["api_key"]) as old:
        assert [q["name"] for q in new.queues()] == ["jobs"]
        with pytest.raises(Unauthorized):
            old.queues()

    unconfirmed = run("tenants", "delete", f"{name}-2", env=owner_env)
    assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr
    assert json.loads(ok("tenants", "show", created["id"], "--json"))["name"] == f"{name}-2", "still there"
    assert json.loads(ok("tenants", "delete", f"{name}-2", "--yes", "--json")) == {"deleted": created["id"]}
    gone = run("tenants", "show", created["id"], env=owner_env)
    assert gone.returncode == 1 and "not_found" in gone.stderr


def test_deliveries_are_acked_nacked_extended_and_released_by_id_or_receipt(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "work", "--max-redeliveries", "0", "--ack-timeout", "30")
    ok("send", "work", "one", "two", "three")
    got = json.loads(ok("get", "work", "--max", "3", "--json"))
    one, three, two = sorted(got, key=lambda m: m["documents"][0]["data"])  # one, three, two: by their texts
    assert json.loads(ok("extend", "work", one["id"], "--seconds", "120", "--json")) == {"extended": 1}
    assert json.loads(ok("ack", "work", "--receipt", one["receipt"], "--json")) == {"acked": 1}
    assert json.loads(ok("nack", "work", three["id"], "--reason", "broken", "--json")) == {
        "requeued": 0, "dead_lettered": 1}
    both = run("ack", "work", two["id"], "--receipt", two["receipt"], env=tenant_env)
    assert both.returncode == 2 and "one of the two" in both.stderr
    assert "RELEASED" in ok("release", "work", "--receipt", two["receipt"])
    (again,) = json.loads(ok("get", "work", "--json"))
    assert (again["id"], again["redelivered"]) == (two["id"], True), "released, not dead: no failed delivery"
    assert json.loads(ok("ack", "work", two["id"], "--json")) == {"acked": 1}
    assert json.loads(ok("queues", "show", "work", "--json"))["dead_letters"] == 1
    assert "broken" in ok("dead-letters", "list", "work")


def test_browse_by_state_finds_the_deliveries_stuck_in_flight_to_release(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "work", "--ack-timeout", "600")
    ok("send", "work", "one", "two", "three", "four")
    (first,) = json.loads(ok("get", "work", "--max", "1", "--consumer", "worker-1", "--json"))
    (second,) = json.loads(ok("get", "work", "--max", "1", "--json"))
    lines = ok("browse", "work", "--state", "in_flight").splitlines()
    assert lines[0].split() == ["ID", "HOLDER", "HELD", "FOR", "ACK", "DUE", "DELIVERY"]
    key_id = tenant_env["ATOMQ_KEY"].removeprefix("aq_").split("_", 1)[0]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[3], r[-1]) for r in rows] == [
        (first["id"], "worker-1", "in", "1"), (second["id"], f"key:{key_id}", "in", "1")]
    assert all(r[2].endswith("s") for r in rows), "held for seconds"
    (only,) = json.loads(ok("browse", "work", "--state", "in_flight", "--limit", "1", "--json"))
    assert (only["id"], only["holder"], only["state"]) == (first["id"], "worker-1", "in_flight")
    assert only["delivered_at"] < only["deadline"]
    ready = json.loads(ok("browse", "work", "--state", "ready", "--json"))
    assert [m["documents"][0]["data"] for m in ready] == ["three", "four"]
    bad = run("browse", "work", "--state", "dead", env=tenant_env)
    assert bad.returncode == 2 and all(s in bad.stderr for s in ("ready", "in_flight", "scheduled"))
    assert "RELEASED" in ok("release", "work", *[r[0] for r in rows])
    assert ok("browse", "work", "--state", "in_flight").splitlines()[1:] == []
    assert len(json.loads(ok("browse", "work", "--state", "ready", "--json"))) == 4


def test_a_delay_holds_sends_and_publishes_and_browse_says_when_each_is_due(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "later", "--delay", "600", "--topic", "news/>")
    shown = json.loads(ok("queues", "show", "later", "--json"))
    assert shown["delay_s"] == 600
    ok("send", "later", "the queue's")
    ok("send", "later", "its own", "--delay", "300")
    ok("publish", "news/eu", "published", "--delay", "900")
    (now,) = json.loads(ok("send", "later", "at once", "--delay", "0", "--json"))["ids"]
    assert [m["id"] for m in json.loads(ok("get", "later", "--max", "10", "--json"))] == [now]
    table = ok("queues", "show", "later")
    assert re.search(r"^delayed\s+3$", table, re.M) and re.search(r"^delay_s\s+600", table, re.M)
    lines = ok("browse", "later", "--state", "scheduled").splitlines()
    assert lines[0].split() == ["ID", "DUE", "WAITING", "FOR", "DELIVERY"]
    assert [(r.split()[1], r.split()[-3:]) for r in lines[1:]] == [("in", ["send", "delay", "0"])] * 3, lines
    waiting = json.loads(ok("browse", "later", "--state", "scheduled", "--json"))
    assert [round(m["due_at"] - m["enqueued_at"]) for m in waiting] == [600, 300, 900]
    bad = run("send", "later", "x", "--delay", "86401", env=tenant_env)
    assert bad.returncode == 2 and "--delay" in bad.stderr


def test_the_operator_lists_the_nodes_and_the_tenants_that_need_them_first(
        node: AtomqServe, tenant_env: dict[str, str]) -> None:
    owner_env = {"ATOMQ_URL": node.url, "ATOMQ_KEY": node.owner_key, "ATOMQ_TENANT": ""}
    ok, mine = succeeding(owner_env), succeeding(tenant_env)
    mine("queues", "create", "work", "--max-redeliveries", "0")
    mine("send", "work", *[f"m{i}" for i in range(30)])
    got = json.loads(mine("get", "work", "--max", "30", "--json"))
    mine("nack", "work", *[m["id"] for m in got], "--reason", "broken")
    tenant = json.loads(mine("queues", "show", "work", "--json"))
    assert tenant["dead_letters"] == 30

    def ranked_first() -> bool:
        top = json.loads(ok("server", "top", "--sort", "dead_letters", "--limit", "1", "--json"))
        return bool(top["tenants"]) and top["tenants"][0]["dead_letters"] == 30

    wait_until(ranked_first, 40, "a sample with the dead letters (every 10 s, by the maintenance lease holder)")
    table = ok("server", "top", "--sort", "dead_letters", "--limit", "1")
    assert table.splitlines()[0].split()[:3] == ["TENANT", "ID", "TRAFFIC"] and "30" in table.splitlines()[1]
    nodes = json.loads(ok("server", "nodes", "--json"))
    assert [(n["url"], n["maintenance_lease"], n["silent"]) for n in nodes] == [(node.url, True, False)]
    assert [w["engine"] for w in nodes[0]["workers"]] == ["fork", "fork"]
    assert nodes[0]["id"] + " *" in ok("server", "nodes")
    refused = run("server", "top", "--sort", "loudest", env=owner_env)
    assert refused.returncode == 2 and "traffic" in refused.stderr


def test_a_node_that_stopped_without_a_word_is_silent_and_no_longer_ages(node: AtomqServe) -> None:
    """A record no node rewrites, as one that was killed, or a restored backup's, leaves."""
    ok = succeeding({"ATOMQ_URL": node.url, "ATOMQ_KEY": node.owner_key, "ATOMQ_TENANT": ""})
    now = float(int(time.time()))  # whole seconds: the uptime below is exact
    left = NodeRecord(id=f"n_{secrets.token_hex(6)}", url="http://10.0.0.9:61717", version="0.1.0", pid=4242,
                      started_at=now - 3600, seen_at=now - 120)
    with node.redis() as store:
        store.hset(k.NODES_KEY, left.id, json.dumps(dataclasses.asdict(left)))
        try:
            listed = {n["id"]: n for n in json.loads(ok("server", "nodes", "--json"))}
            assert (listed[left.id]["silent"], listed[left.id]["up_s"]) == (True, 3480), "up until last heard"
            running = next(n for n in listed.values() if n["url"] == node.url)
            assert not running["silent"] and running["up_s"] > 0
            (row,) = [line for line in ok("server", "nodes").splitlines() if line.startswith(left.id)]
            assert re.search(r" 58m 0s +SILENT, 2m \d+s ago +none$", row), row
        finally:
            store.hdel(k.NODES_KEY, left.id)


def test_a_big_send_from_a_file_a_drain_of_the_dead_letters_and_a_clear(
        node: AtomqServe, tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "bulk", "--max-redeliveries", "0")
    lines = "".join(f"line {i}\n" for i in range(2_345))
    sent = subprocess.run([*ATOMQ, "send", "bulk", "--json"], input=lines, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **tenant_env})
    assert sent.returncode == 0, sent.stderr
    assert len(json.loads(sent.stdout)["ids"]) == 2_345
    with AtomqClient(node.url, tenant_env["ATOMQ_KEY"]) as api:
        while taken := api.get("bulk", max_messages=1000):
            api.nack("bulk", receipts=[m["receipt"] for m in taken], reason="broken")
    assert json.loads(ok("queues", "show", "bulk", "--json"))["dead_letters"] == 2_345
    assert json.loads(ok("dead-letters", "resend", "bulk", "--reason", "broken", "--json")) == {"resent": 2_345}
    shown = json.loads(ok("queues", "show", "bulk", "--json"))
    assert (shown["depth"], shown["dead_letters"]) == (2_345, 0)
    ok("queues", "create", "feed", "--model", "publish_subscribe", "--max-redeliveries", "0")
    with AtomqClient(node.url, tenant_env["ATOMQ_KEY"]) as api:
        for subscriber in ("audit", "billing"):
            api.request("PUT", f"/v1/queues/feed/subscribers/{subscriber}", {})
        api.send_texts("feed", ["x", "y"])
        for subscriber in ("audit", "billing"):
            taken = api.get("feed", max_messages=10, subscriber=subscriber)
            api.nack("feed", receipts=[m["receipt"] for m in taken], subscriber=subscriber, reason="broken")
    assert json.loads(ok("dead-letters", "resend", "feed", "--json")) == {"resent": 4}, "every subscriber's"
    unconfirmed = run("queues", "clear", "bulk", env=tenant_env)
    assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr
    assert json.loads(ok("queues", "clear", "bulk", "--yes", "--json")) == {"deleted": 2_345}
    assert json.loads(ok("queues", "show", "bulk", "--json"))["depth"] == 0
    missing = run("ack", "bulk", "1795461670403-000000000002", env=tenant_env)
    assert missing.returncode == 1 and "1 of the 1 ids matched nothing" in missing.stderr
    assert "ACKED" in missing.stdout, "the result is printed first"


def test_the_server_settings_are_shown_and_changed(node: AtomqServe) -> None:
    owner_env = {"ATOMQ_URL": node.url, "ATOMQ_KEY": node.owner_key, "ATOMQ_TENANT": ""}
    ok = succeeding(owner_env)
    shown = json.loads(ok("server", "show", "--json"))
    assert "dedupe_window_s" in shown and "memory_state" in shown
    table = ok("server", "show")
    assert table.splitlines()[0].split() == ["SETTING", "VALUE"] and "memory_thresholds" in table
    try:
        changed = json.loads(ok("server", "update", "--set", "dedupe_window_s=600",
                                "--set", "redelivery_delays_s=[1,2,3]", "--json"))
        assert (changed["dedupe_window_s"], changed["redelivery_delays_s"]) == (600, [1, 2, 3])
        refused = run("server", "update", "--set", "dedupe_window_s=-1", env=owner_env)
        assert refused.returncode == 1 and "dedupe_window_s" in refused.stderr
        assert json.loads(ok("server", "show", "--json"))["dedupe_window_s"] == 600, "a refused change changes nothing"
    finally:
        ok("server", "update", "--set", f"dedupe_window_s={shown['dedupe_window_s']}",
           "--set", f"redelivery_delays_s={json.dumps(shown['redelivery_delays_s'])}")


def test_subscribers_are_added_ahead_of_the_first_send_listed_and_removed(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "news", "--model", "publish_subscribe")
    assert json.loads(ok("subscribers", "list", "news", "--json")) == []
    assert ok("subscribers", "add", "news", "audit").splitlines()[1].split() == ["news", "audit"]
    ok("subscribers", "add", "news", "billing")
    ok("subscribers", "add", "news", "audit")  # one that exists: nothing changes
    ok("send", "news", "hello")
    header, *rows = ok("subscribers", "list", "news").splitlines()
    assert header.split() == ["NAME", "DEPTH", "IN", "FLIGHT", "DEAD", "SCHEDULED"]
    assert [row.split() for row in rows] == [["audit", "1", "0", "0", "0"], ["billing", "1", "0", "0", "0"]]
    unconfirmed = run("subscribers", "remove", "news", "billing", env=tenant_env)
    assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr
    assert "1 waiting" in unconfirmed.stderr, "the confirmation says what goes"
    assert json.loads(ok("subscribers", "remove", "news", "billing", "--yes", "--json")) == {
        "removed": "billing", "queue": "news"}
    assert [s["name"] for s in json.loads(ok("subscribers", "list", "news", "--json"))] == ["audit"]
    missing = run("subscribers", "remove", "news", "billing", "--yes", env=tenant_env)
    assert missing.returncode == 1 and "has no subscriber billing" in missing.stderr
    ok("queues", "create", "jobs")
    no_subscribers = run("subscribers", "list", "jobs", env=tenant_env)
    assert no_subscribers.returncode == 1 and "only a publish_subscribe queue has subscribers" in no_subscribers.stderr


def test_a_send_or_publish_that_stores_nothing_says_so_and_exits_1(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "news", "--model", "publish_subscribe")
    lost = run("send", "news", "hello", "--json", env=tenant_env)
    assert lost.returncode == 1, lost.stderr
    answer = json.loads(lost.stdout)
    assert len(answer["ids"]) == 1 and answer["copies"] == 0, "the answer is printed first"
    assert "has no subscribers" in lost.stderr and "atomq subscribers add news NAME" in lost.stderr
    lines = "".join(f"line {i}\n" for i in range(250))
    from_file = subprocess.run([*ATOMQ, "send", "news"], input=lines, capture_output=True, text=True, timeout=60,
                               env={**os.environ, **tenant_env})
    assert from_file.returncode == 1
    assert "250 of the 250 messages, in 3 requests, were stored nowhere" in from_file.stderr, from_file.stderr
    assert from_file.stderr.count("has no subscribers") == 1, "one warning, with the counts"
    ok("subscribers", "add", "news", "reader")
    assert json.loads(ok("send", "news", "hello", "--json"))["copies"] == 1
    nowhere = run("publish", "no/queue/here", "x", env=tenant_env)
    assert nowhere.returncode == 1 and "no queue attracts topic no/queue/here" in nowhere.stderr
    assert nowhere.stdout.split() == ["ID", "QUEUES"], "the table, empty, first"


def test_a_send_run_again_with_its_idempotency_key_stores_nothing_twice(tenant_env: dict[str, str]) -> None:
    ok = succeeding(tenant_env)
    ok("queues", "create", "ledger", "--topic", "ledger/>")
    first = json.loads(ok("send", "ledger", "a", "b", "--idempotency-key", "import-2026-11-27", "--json"))
    again = json.loads(ok("send", "ledger", "a", "b", "--idempotency-key", "import-2026-11-27", "--json"))
    assert again["ids"] == first["ids"] and len(first["ids"]) == 2
    published = json.loads(ok("publish", "ledger/x", "c", "--idempotency-key", "pub-1", "--json"))
    assert json.loads(ok("publish", "ledger/x", "c", "--idempotency-key", "pub-1", "--json")) == published
    assert json.loads(ok("queues", "show", "ledger", "--json"))["depth"] == 3
    reused = run("send", "ledger", "other", "--idempotency-key", "import-2026-11-27", env=tenant_env)
    assert reused.returncode != 0 and "Idempotency-Key" in reused.stderr, reused.stderr
