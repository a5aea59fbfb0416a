"""The CRI matrix's report: one cell's lines as it ends, the table of all cells, and the
verdict (what fails the run)."""

import tenant_view

fmt_ms = tenant_view.ms


def count(x):
    return "-" if x is None else "%d" % x


def from_exit(st):
    """'p50/p99' ms from the runtime's exit to the tenant's GPU back, or '-'."""
    xs = st.view.of("exit") if st.view else []
    return tenant_view.p50_p99(xs) if xs else "-"


def from_end(st):
    """'p50/p99' ms from the runtime invocation's end (its parent told) to the GPU back, or '-'."""
    xs = st.view.after_end() if st.view else []
    return tenant_view.p50_p99(xs) if xs else "-"


def loads(st):
    """v2: the wrappers the daemon loaded on a repair's path (a verifier run between the
    runtime's exit and the grant) and ahead of its repairs; '' where it loaded none (v1)."""
    if not st.loads_on_path and not st.loads_ahead:
        return ""
    return " wrappers loaded on a repair's path %s, ahead %s" % (count(st.loads_on_path), count(st.loads_ahead))


def print_run(st):
    print("  %-28s %-8s starts %d/%d updates %d/%d (landed %d) restarts %d/%d runtime errors %d "
          "whole %d/%d p50 %s ms p99 %s ms exec ok %d/%d; daemon: revocations %s regrants %s apply waits %s%s; "
          "%.0f s" % (
              st.cell, st.mode, st.starts, st.start_calls, st.updates, st.update_calls, st.updates_landed,
              st.restarts, st.restart_calls, st.runtime_errors, st.whole, st.whole_checks, fmt_ms(st.percentile(50)),
              fmt_ms(st.percentile(99)), st.exec_ok, st.exec_checks,
              count(st.revocations), count(st.regrants), count(st.apply_waits), loads(st), st.seconds), flush=True)
    steps = ("start", "update", "restart")
    if "reload" in st.latencies_by or "reload" in st.not_whole:  # v2/systemd: the daemon-reload after each update
        steps = ("start", "update", "reload", "restart")
    print("    whole again after (p50/p99 ms): " + ", ".join(
        "%s %s/%s (%d)" % (what, fmt_ms(st.percentile(50, what)), fmt_ms(st.percentile(99, what)),
                           len(st.latencies_by.get(what, []))) for what in steps))
    if st.hook_grants:
        print("    NVIDIA hook v2 grants: %d, failed %d%s; most device programs on a scope: %s; "
              "daemon's DeviceAllow= additions (regrants method=systemd): %s" % (
                  st.hook_grants, sum(st.hook_failures.values()),
                  "".join(" (%d x %s)" % (n, t) for t, n in sorted(st.hook_failures.items())),
                  count(st.max_programs), count(st.systemd_regrants)))
    if st.check:
        print("    " + st.check.report())
    if st.view:
        for line in st.view.report():
            print("    " + line)
    for text, n in sorted(st.errors.items(), key=lambda kv: -kv[1]):
        print("    %4d x %s" % (n, text))


def table(results, not_run):
    head = ("cell", "mode", "starts", "updates", "restarts", "rt errors", "landed", "whole", "p50 ms", "p99 ms",
            "from exit p50/p99 ms", "from end", "extras", "sandbox")
    rows = [head]
    for st in results:
        rows.append((st.cell, st.mode, "%d/%d" % (st.starts, st.start_calls), "%d/%d" % (st.updates, st.update_calls),
                     "%d/%d" % (st.restarts, st.restart_calls), str(st.runtime_errors),
                     "%d/%d" % (st.updates_landed, st.updates), "%d/%d" % (st.whole, st.whole_checks),
                     fmt_ms(st.percentile(50)), fmt_ms(st.percentile(99)), from_exit(st), from_end(st),
                     str(len(st.extras)),
                     "ok" if not st.sandbox_touched else "%d GPU rules" % len(st.sandbox_touched)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print()
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for reason in not_run:
        print("not run: " + reason)


def verdict(results, not_run, ci):
    failures = []
    for st in results:
        name = "%s %s" % (st.cell, st.mode)
        if st.runtime_errors:
            failures.append("%s: %d runtime errors" % (name, st.runtime_errors))
        if st.start_calls == 0:
            failures.append("%s: nothing ran" % name)
        if st.sandbox_touched:
            failures.append("%s: the sandbox got GPU rules: %s" % (name, st.sandbox_touched[0]))
        # systemd attaches a new program when asked over D-Bus: asked inside a runtime's apply,
        # it can swap the program runc looked at before runc replaces it (runc's ENOENT).
        inside = st.view.calls.sends_inside_applies() if st.view else []
        if inside:
            failures.append("%s: gpu-devwatch sent systemd %d D-Bus message(s) inside a runtime's apply (%s)" % (
                name, len(inside), inside[0][1]))
        if st.mode not in ("enforce", "check"):
            continue
        if st.check and (st.check.failed or st.check.at_limit or not st.check.granting_runs):
            failures.append("%s: %s" % (name, st.check.report()))
        if st.starts != st.start_calls or st.restarts != st.restart_calls or st.updates != st.update_calls:
            failures.append("%s: not every start/update/restart succeeded" % name)
        if st.updates_landed != st.updates:
            failures.append("%s: %d updates did not land: %s" % (name, st.updates - st.updates_landed,
                                                                 st.landed_failures[:1]))
        if st.whole != st.whole_checks:
            failures.append("%s: %d times not whole again within %s (%s)" % (
                name, st.whole_checks - st.whole, "2 s" if st.check else "1 s", ", ".join(sorted(set(st.not_whole)))))
        if st.exec_ok != st.exec_checks:
            failures.append("%s: opens from inside not as expected: %s" % (name, st.exec_failures[:2]))
        if st.view and st.view.count("before exit"):
            failures.append("%s: the GPU came back %d times before the runtime that revoked it had exited "
                            "(a grant inside its apply)" % (name, st.view.count("before exit")))
        if st.view and st.view.errors:
            failures.append("%s: the tenant's view: %s" % (name, sorted(set(st.view.errors))[0]))
        if st.extras:
            failures.append("%s: granted beyond the allocation: %s" % (name, st.extras[:2]))
        # Under the systemd driver the daemon adds the GPU to each new runc scope's DeviceAllow=
        # once runc's create has written its drop-ins, so that the next daemon-reload keeps it.
        # crun's scopes keep DevicePolicy=auto and no DeviceAllow=: one added there would make
        # systemd enforce and take away what crun allows, so the daemon must add none.
        crun = " crun " in st.cell
        if st.check:  # check's DeviceAllow= additions are not the daemon's to count
            continue
        if st.hook_grants and not crun and not st.systemd_regrants:
            failures.append("%s: the daemon never added to a scope's DeviceAllow=" % name)
        if crun and st.systemd_regrants:
            failures.append("%s: the daemon added to a crun scope's DeviceAllow= %d times" % (name,
                                                                                           st.systemd_regrants))
    # The v2/systemd cell's NVIDIA hook failures are printed, not judged: the hook's grant runs
    # here after StartContainer returned, not inside runc's create as on a node.
    if ci:
        failures += ["not run under CI: " + r for r in not_run]
    return failures
