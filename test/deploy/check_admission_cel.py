#!/usr/bin/env python3
"""deploy/kubernetes/admission-policy.yaml run, not just read: its CEL evaluated on admission
requests as the API server evaluates them (test/support/admission.py, cel.py).

usage: check_admission_cel.py SOURCE_DIR [--self-test]

1. The interpreter against the CEL specification's semantics (precedence, errors as values
   and their absorption by && and ||, heterogeneous equality, 64-bit ints, macros, has()):
   a table of expressions and the value or error the spec gives.
2. The policies compile (names, variables, functions) and decide as they say, on a Node and
   a Pod as kubelet and the scheduler leave them: the daemon's own writes (its condition
   types, the gate on a pod of its node that declares it) are admitted; everything else a
   stolen or misused token could try is denied with the policy's message, and other users
   are not touched.
--self-test: each of a set of broken copies of the policy must let one of the hostile
requests through, so the cases above would catch that breakage.

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import copy
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
import admission  # noqa: E402
import cel  # noqa: E402

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

from admission_cases import NODE_CASES, POD_CASES, BREAKAGES, OWN_NODE, SA  # noqa: E402

ERROR = object()  # the expected outcome is an error value

SPEC_CASES = [
    ("1 + 2 * 3 - 4 / 2 % 3", 5), ("(1 + 2) * 3", 9), ("-7 / 2", -3), ("-7 % 3", -1), ("7 % -3", 1),
    ("9223372036854775807 + 1", ERROR), ("-9223372036854775808", -9223372036854775808),
    ("-9223372036854775808 / -1", ERROR), ("1 / 0", ERROR), ("1 % 0", ERROR), ("1.0 / 0.0 > 1e308", True),
    ("1 + 1.0", ERROR), ("'a' + 'b'", "ab"), ("[1] + [2]", [1, 2]), ("'a' + 1", ERROR),
    ("1 == 1.0", True), ("1 == '1'", False), ("[1, 'a'] == [1, 'a']", True), ("[1] == [1, 2]", False),
    ("{'a': 1} == {'a': 1.0}", True), ("{'a': 1} == {'b': 1}", False), ("null == null", True),
    ("{} == []", False), ("1 < 1.5", True), ("'a' < 'b'", True), ("1 < 'a'", ERROR), ("true < false", False),
    ("'a' in ['a', 'b']", True), ("'c' in {'c': 1}", True), ("1 in {'c': 1}", False), ("1 in 1", ERROR),
    ("false && 1 / 0 == 1", False), ("1 / 0 == 1 && false", False), ("true || 1 / 0 == 1", True),
    ("1 / 0 == 1 || true", True), ("1 / 0 == 1 || false", ERROR), ("true && 1 / 0 == 1", ERROR),
    ("1 && true", ERROR), ("!true", False), ("!1", ERROR), ("true ? 1 : 2", 1), ("false ? 1 : 1 / 0", ERROR),
    ("1 ? 2 : 3", ERROR), ("true ? 'x' : 1 / 0", "x"), ("false || true ? 1 : 2", 1),
    ("[1, 2, 3].all(x, x > 0)", True), ("[0, 1].all(x, 1 / x > 0)", ERROR), ("[0, -1].all(x, 1 / x > 0)", False),
    ("[0, 1].exists(x, 1 / x == 1)", True), ("[0].exists(x, 1 / x == 1)", ERROR), ("[].exists(x, x)", False),
    ("[1, 2, 1].exists_one(x, x == 1)", False), ("[1, 2].exists_one(x, x == 1)", True),
    ("[1, 2, 3].filter(x, x % 2 == 1)", [1, 3]), ("[1, 2].map(x, x * 10)", [10, 20]),
    ("[1, 2, 3].map(x, x > 1, x * 10)", [20, 30]), ("{'a': 1, 'b': 2}.all(k, k in ['a', 'b'])", True),
    ("[1, 2].filter(x, x)", ERROR), ("has({'a': 1}.a)", True), ("has({'a': 1}.b)", False), ("has(1.a)", ERROR),
    ("{'a': 1}.b", ERROR), ("{'a': {'b': 2}}.a.b", 2), ("[1, 2][1]", 2), ("[1][1]", ERROR), ("{'a': 1}['a']", 1),
    ("size('héllo')", 5), ("'héllo'.size()", 5), ("size([1, 2])", 2), ("size({'a': 1})", 1), ("size(1)", ERROR),
    ("'abc'.startsWith('ab') && 'abc'.endsWith('bc') && 'abc'.contains('b')", True), ("'abc'.contains(1)", ERROR),
    ("'abc'.matches('^a.c$')", True), ("'ABC'.lowerAscii()", "abc"), ("int('42') + int(2.9)", 44),
    ("string(1) + string(true)", "1true"), ("'\\x41\\u00e9\\n'", "A\u00e9\n"), ("r'\\n'", "\\n"),
    ("'''a'b'''", "a'b"), ("dyn(1) == 1", True), ("x", ERROR), ("[x, 1].exists(y, y == 1)", ERROR),
    ("unknownFunction(1)", ERROR), ("1.size()", ERROR),
]


def check_spec():
    errors = []
    for source, want in SPEC_CASES:
        try:
            got = cel.evaluate(source, {})
        except cel.CelError as e:
            got = ERROR
            detail = str(e)
        else:
            detail = repr(got)
        if (got is ERROR) != (want is ERROR) or (want is not ERROR and not (type(got) is type(want)
                                                                             and cel.equal(got, want))):
            errors.append(f"CEL {source!r}: {detail}, the spec gives {'an error' if want is ERROR else repr(want)}")
    for bad in ("1 +", "[1, 2", "a.b(", "1 = 1", "if", "1u", "b'x'"):
        try:
            cel.parse(bad)
            errors.append(f"CEL {bad!r}: parsed, but it is not CEL this interpreter reads")
        except cel.CelError:
            pass
    return errors


def run_cases(policies, resource, cases):
    """(what, outcome) for each case: outcome None when admitted, else the denial."""
    out = []
    for case in cases:
        old, new = case["old"](), case["new"]()
        request = admission.status_update(resource, new["metadata"]["name"], old, new, case.get("user", SA()),
                                          new["metadata"].get("namespace", ""))
        try:
            admission.admit(policies, request)
            out.append((case, None))
        except admission.Denied as denied:
            out.append((case, denied))
    return out


def check_policies(docs):
    errors = []
    policies = admission.load(docs)
    for resource, cases in (("nodes", NODE_CASES), ("pods", POD_CASES)):
        for case, denied in run_cases(policies, resource, cases):
            want = case.get("denied")
            if want is None and denied is not None:
                errors.append(f"{resource}: {case['what']}: denied ({denied.message}), must be admitted")
            elif want is not None and (denied is None or denied.code != 403 or want not in denied.message):
                errors.append(f"{resource}: {case['what']}: {'admitted' if denied is None else denied.message},"
                              f" must be denied (403) saying {want!r}")
    return errors


def self_test(docs):
    failures = []
    for what, edit in BREAKAGES.items():
        broken = copy.deepcopy(docs)
        try:
            edit(broken)
            caught = bool(check_policies(broken))
        except ValueError:
            caught = True  # no longer compiles: that too is caught
        if not caught:
            failures.append(f"self-test: not caught: {what}")
    return failures


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    docs = [d for d in yaml.safe_load_all((root / "deploy/kubernetes/admission-policy.yaml").read_text()) if d]
    errors = check_spec()
    try:
        errors += check_policies(docs)
    except ValueError as e:
        errors.append(str(e))
    if "--self-test" in sys.argv[2:]:
        errors += self_test(docs)
    for e in errors:
        print(f"admission-policy.yaml: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(SPEC_CASES)} CEL cases as the spec gives them; {len(NODE_CASES)} node and {len(POD_CASES)} pod"
          f" status updates admitted or denied as the policies say, for {SA()['username']} on {OWN_NODE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
