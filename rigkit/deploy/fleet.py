"""A deploy across a lab of rigs in batches: canary first, then the rest, stopping at the first batch
that fails (issue 67; ``rigkit deploy --canary N --batch K``, docs/operating.md "A lab of rigs").

The model is Ansible's ``serial`` with ``max_fail_percentage: 0`` and deploy-rs's per-node confirm:

- **Order** (:func:`batches`): the hosts in the inventory's order (``--host`` narrows them, the
  order stays the inventory's); the first ``canary`` hosts are batch 1, then batches of ``batch`` hosts (the rest
  at once when ``batch`` is 0). Neither given: one batch of every host (the deploy as before).
- **Each batch** is one :func:`rigkit.deploy.changes.deploy` (its hosts probed, locked when the batch
  starts — never a later batch's — deployed by pyinfra in parallel, each confirmed or put back, smoked),
  every host's end written to the outcome record (:mod:`rigkit.deploy.outcomes`) as it comes.
- **The stop rule** (:func:`stops`): a batch in which a host ``failed`` (its change or confirmation
  failed: put back) or was ``refused`` (its lock held), or in which no host was reached, stops the
  rollout; an ``unreachable`` host beside reached good ones does not (nothing was tried there: serving
  judges a change, not reachability), it is recorded for ``--retry-failed``. A converged host (the
  probe path) counts as a good one: it already declares this run's state, confirmed when it took it.
- **Hosts not reached** (every later batch) are never touched, locked or probed; each is recorded
  ``not-reached`` naming the batch and host that stopped the run, and said so.
- **The exit code**: 0 when every host ended ``ok`` or ``converged``, else 1 (or a batch's own worse
  code, :func:`rigkit.exitcodes.combine`).
"""

from __future__ import annotations

from typing import Any, Callable

from rigkit import exitcodes

#: The outcomes of a host that went well (:data:`rigkit.deploy.outcomes.OUTCOMES`).
GOOD = ("ok", "converged")
#: The outcomes that stop the rollout after their batch.
STOPPING = ("failed", "refused")


def batches(names: list[str], canary: int = 0, batch: int = 0) -> list[list[str]]:
    """``names`` cut into batches: the first ``canary`` (0: no canary batch), then ``batch`` at a time
    (0: the rest at once). Every name once, in order; no empty batch. Raises ValueError naming the
    option, its value and what is allowed when ``canary`` or ``batch`` is negative, or ``canary`` is
    more than ``len(names)``."""
    if canary < 0 or canary > len(names):
        raise ValueError(f"--canary {canary}: allowed 1 to {len(names)} (the number of hosts this deploy names)")
    if batch < 0:
        raise ValueError(f"--batch {batch}: allowed 1 or more (hosts per batch after the canary)")
    out = [names[:canary]] if canary else []
    rest = names[canary:]
    size = batch or len(rest)
    out += [rest[i:i + size] for i in range(0, len(rest), size)] if rest else []
    return out


def stops(ended: dict[str, str]) -> str | None:
    """Whether a batch whose hosts ended as ``ended`` (``{host: outcome}``) stops the rollout: the first
    host (in order) whose outcome is in :data:`STOPPING`, ``"no host of the batch was reached"`` when
    every host is ``unreachable`` (or the batch recorded none), else None."""
    for name, outcome in ended.items():
        if outcome in STOPPING:
            return f"{name} {outcome}"
    if not any(o in GOOD for o in ended.values()):
        return "no host of the batch was reached"
    return None


class Watch:
    """An :class:`rigkit.deploy.run.Output` that passes everything on to ``out`` and keeps each host's last
    error line (``NAME: …``, as :meth:`rigkit.deploy.transaction.Change.say` writes them) for the
    outcome record's ``why``."""

    def __init__(self, out: Any, names: list[str]) -> None:
        self.out, self.names, self.last_error = out, names, {}

    def note(self, text: str, error: bool = False) -> None:
        """One line on to ``out``; an error line about a host kept as that host's last."""
        if error:
            for name in self.names:
                if text.startswith(f"{name}:") or f"{name}/" in text.split(":", 1)[0]:
                    self.last_error[name] = text
        self.out.note(text, error)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.out, attr)


def ended_line(done: int, outcome: dict[str, str]) -> str:
    """The closing line of a rollout of ``done`` batches that did not stop (the stop's own line says a
    stopped one): ``the rollout ended after batch 3/3: 2 ok (a, b), 1 converged (c)``, every outcome
    met counted with its hosts in order (:data:`rigkit.deploy.outcomes.OUTCOMES`'s order)."""
    from rigkit.deploy.outcomes import OUTCOMES

    parts = [f"{len(hosts)} {o} ({', '.join(hosts)})" for o in OUTCOMES
             if (hosts := [h for h, got in outcome.items() if got == o])]
    return f"the rollout ended after batch {done}/{done}: {', '.join(parts) or 'no host'}"


def rollout(names: list[str], plan: list[list[str]], deploy_batch: Callable[[list[str], Callable[[str, str, str], None], Any], int],
            ended: Callable[[str, str, str], None], out: Any, canary: bool = False) -> int:
    """Deploy ``names`` batch by batch as ``plan`` (:func:`batches`) says: ``deploy_batch(batch, end,
    watch)`` deploys one batch (:func:`rigkit.deploy.changes.deploy` limited to it), calling ``end(host,
    outcome, why)`` as each host ends and saying everything to ``watch`` (a :class:`Watch` on ``out``);
    every end goes on to ``ended`` (the outcome record; one that raises OSError or ValueError is said, and the
    rollout goes on). Each batch of several is said as ``batch i/n: hosts``, batch 1 marked ``(canary)`` only with
    ``canary`` (``--canary N`` made it; ``--batch K`` alone has none). A host the batch's deploy returned without
    ending is recorded ``failed`` with the batch's exit code (never silently good). After a batch that
    :func:`stops`, every host of the later batches is ended ``not-reached``; a rollout of several
    batches that did not stop ends with :func:`ended_line` (an error line when a host of the last batch
    did not end well). Returns the batches' exit
    codes combined (:func:`rigkit.exitcodes.combine`) with 1 when a host did not end ``ok`` or
    ``converged``."""
    outcome: dict[str, str] = {}
    codes: list[int] = []
    watch = Watch(out, names)

    def end(host: str, result: str, why: str) -> None:
        outcome[host] = result
        last = watch.last_error.get(host)
        try:
            ended(host, result, f"{why}; last error: {last}" if result == "failed" and last and last != why else why)
        except (OSError, ValueError) as exc:  # the record is the operator's aid, never the deploy's failure
            out.note(f"{host}: its outcome ({result}) could not be recorded: {exc}", error=True)

    stopped = False
    for i, group in enumerate(plan, 1):
        if len(plan) > 1:
            out.note(f"batch {i}/{len(plan)}{' (canary)' if canary and i == 1 else ''}: {', '.join(group)}")
        code = deploy_batch(group, end, watch)
        codes.append(code)
        for host in group:
            if host not in outcome:
                end(host, "failed", watch.last_error.get(host) or f"the batch's deploy exited {code}")
        why = stops({h: outcome[h] for h in group})
        if why and i < len(plan):
            later = [h for g in plan[i:] for h in g]
            line = f"the rollout stopped after batch {i}/{len(plan)} ({why}); not reached, nothing touched there"
            out.note(f"{line}: {', '.join(later)}", error=True)
            for host in later:
                end(host, "not-reached", line)
            stopped = True
            break
    if len(plan) > 1 and not stopped:
        out.note(ended_line(len(plan), outcome), error=any(o not in GOOD for o in outcome.values()))
    bad = [h for h in names if outcome.get(h) not in GOOD]
    if bad and len(names) > 1:
        out.note(f"hosts to retry (the deploy's --retry-failed takes them): {', '.join(bad)}", error=True)
    return exitcodes.combine(*codes, exitcodes.FAILED if bad else exitcodes.OK)
