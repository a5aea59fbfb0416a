"""A Common Expression Language (CEL) interpreter for the tests: the part of the language
that Kubernetes' ValidatingAdmissionPolicies use, with the semantics of the CEL
specification (github.com/google/cel-spec, langdef.md), written for this repository.

Why here: Debian 12 packages no CEL engine (neither cel-go nor cel-cpp) and this project
takes libraries from Debian only, so without this the policies in deploy/ were only ever
read, never run. What it covers, as the spec says:
- literals: int (decimal, 0x hex), double, string ('', "", triple-quoted, r'' raw, with the
  spec's escapes), bool, null, lists, maps;
- operators with the spec's precedence: ?: || && == != < <= > >= in + - * / % ! unary -;
  field selection, indexing, calls and receiver calls;
- errors as values: `&&` and `||` absorb an error when the other side decides (false && error
  is false, in either order), a macro's `all`/`exists` likewise; anything else that meets an
  error is that error;
- equality: lists element by element, maps by their keys and values, numbers across int and
  double by value, values of different kinds unequal (heterogeneous equality); ordering only
  between numbers, strings or bools;
- the macros has(), all, exists, exists_one, map (both forms), filter;
- functions: size, contains, startsWith, endsWith, matches (Python's re for RE2), int,
  double, string (of an int, bool or string), dyn,
  and Kubernetes' lowerAscii / upperAscii;
- int arithmetic is 64-bit and overflow, division or modulo by zero are errors.
Not covered (an expression using them is refused by `check`): uint and bytes literals,
timestamps and durations, optionals, protobuf messages, the other Kubernetes libraries.

JSON objects are CEL maps, so `object.status.x` of an absent field is an error
("no such key") and has(object.status.x) is false, as Kubernetes evaluates them.
"""
import math
import re

from cel_parse import INT_MAX, INT_MIN, CelError, parse

__all__ = ["CelError", "parse", "evaluate", "check", "LazyVariables", "FUNCTIONS"]


def kind(value):
    """The CEL type of a value, by name."""
    if value is None:
        return "null"
    found = {bool: "bool", int: "int", float: "double", str: "string", list: "list", dict: "map"}.get(type(value))
    if found is None:
        if isinstance(value, LazyVariables):
            return "map"
        raise CelError(f"a value CEL has no type for: {type(value).__name__}")
    return found


def _number(value):
    return kind(value) in ("int", "double")


def equal(a, b):
    """CEL equality: numbers by value across int and double, lists and maps element by
    element, values of different types unequal."""
    if _number(a) and _number(b):
        return a == b
    ka = kind(a)
    if ka != kind(b):
        return False
    if ka == "list":
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if ka == "map":
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return a == b


def _int(value):
    if not INT_MIN <= value <= INT_MAX:
        raise CelError("int overflow")
    return value


class LazyVariables:
    """Kubernetes' `variables`: each evaluated on first use, from the variables declared
    before it; an error is the error of every expression that uses it."""

    def __init__(self, trees, env):
        self.trees, self.env, self.values = trees, env, {}

    def get(self, name):
        if name not in self.trees:
            raise CelError(f"no such key: {name}")
        if name not in self.values:
            try:
                self.values[name] = (True, _eval(self.trees[name], self.env))
            except CelError as e:
                self.values[name] = (False, e)
        ok, value = self.values[name]
        if not ok:
            raise value
        return value


def _select(target, field):
    if isinstance(target, LazyVariables):
        return target.get(field)
    if kind(target) != "map":
        raise CelError(f"no such field '{field}' on a {kind(target)}")
    if field not in target:
        raise CelError(f"no such key: {field}")
    return target[field]


def _index(target, key):
    k = kind(target)
    if k == "list":
        if kind(key) != "int":
            raise CelError(f"a list index must be an int, not a {kind(key)}")
        if not 0 <= key < len(target):
            raise CelError(f"index out of range: {key}")
        return target[key]
    if k == "map":
        for existing in target:
            if equal(existing, key):
                return target[existing]
        raise CelError(f"no such key: {key}")
    raise CelError(f"no such overload: {k}[{kind(key)}]")


def _compare(op, a, b):
    ka, kb = kind(a), kind(b)
    if not ((_number(a) and _number(b)) or (ka == kb and ka in ("string", "bool"))):
        raise CelError(f"no such overload: {ka} {op} {kb}")
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _arith(op, a, b):
    ka, kb = kind(a), kind(b)
    if ka != kb or (op != "+" and ka not in ("int", "double")) or ka not in ("int", "double", "string", "list"):
        raise CelError(f"no such overload: {ka} {op} {kb}")
    if op == "%" and ka != "int":
        raise CelError(f"no such overload: {ka} % {kb}")
    if ka == "double":
        if op == "/" and b == 0:  # IEEE 754, as CEL's doubles are
            return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[op]
    if ka != "int":
        return a + b
    if op in ("/", "%"):
        if b == 0:
            raise CelError("division by zero" if op == "/" else "modulus by zero")
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # truncated, as in C
        return _int(quotient) if op == "/" else a - b * quotient
    return _int({"+": a + b, "-": a - b, "*": a * b}[op])


def _binary(op, a, b):
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    if op == "in":
        if kind(b) == "list":
            return any(equal(a, x) for x in b)
        if kind(b) == "map":
            return any(equal(a, k) for k in b)
        raise CelError(f"no such overload: {kind(a)} in {kind(b)}")
    if op in ("<", "<=", ">", ">="):
        return _compare(op, a, b)
    return _arith(op, a, b)


def _to_int(x):
    k = kind(x)
    if k == "int":
        return x
    if k == "double":
        if x != x or not INT_MIN <= x <= INT_MAX:
            raise CelError("int conversion out of range")
        return int(x)
    if k == "string" and re.fullmatch(r"[+-]?\d+", x):
        return _int(int(x))
    raise CelError(f"cannot convert {k} {x!r} to int")


def _to_string(x):
    k = kind(x)
    if k == "string":
        return x
    if k == "bool":
        return "true" if x else "false"
    if k == "int":
        return str(x)
    # string(double) is left out: CEL formats it as Go's shortest %g, which Python's repr
    # is not; better refused than answered wrongly.
    raise CelError(f"string({k}) is not covered here")


def _string_method(check_kinds, fn):
    def call(*args):
        if [kind(a) for a in args] != check_kinds:
            raise CelError(f"no such overload for ({', '.join(kind(a) for a in args)})")
        return fn(*args)
    return call


def _size(x):
    if kind(x) not in ("string", "list", "map"):
        raise CelError(f"no such overload: size({kind(x)})")
    return len(x)


# name -> (callable, how it may be called: "global", "receiver" or both)
FUNCTIONS = {
    "size": (_size, {"global", "receiver"}),
    "contains": (_string_method(["string", "string"], lambda s, t: t in s), {"receiver"}),
    "startsWith": (_string_method(["string", "string"], str.startswith), {"receiver"}),
    "endsWith": (_string_method(["string", "string"], str.endswith), {"receiver"}),
    "matches": (_string_method(["string", "string"], lambda s, r: re.search(r, s) is not None),
                {"global", "receiver"}),
    "lowerAscii": (_string_method(["string"], lambda s: "".join(c.lower() if c.isascii() else c for c in s)),
                   {"receiver"}),
    "upperAscii": (_string_method(["string"], lambda s: "".join(c.upper() if c.isascii() else c for c in s)),
                   {"receiver"}),
    "int": (_to_int, {"global"}),
    "double": (lambda x: float(x) if _number(x) else float(_string_method(["string"], float)(x)), {"global"}),
    "string": (_to_string, {"global"}),
    "dyn": (lambda x: x, {"global"}),
}


def _truth(value, what):
    if kind(value) != "bool":
        raise CelError(f"no such overload: {what} on a {kind(value)}")
    return value


def _logic(node, env):
    """&& and ||: the side that decides wins over an error on the other side."""
    decisive = node[0] == "or"  # true decides ||, false decides &&
    outcomes = []
    for side in node[1:]:
        try:
            value = _truth(_eval(side, env), "&&" if not decisive else "||")
        except CelError as e:
            outcomes.append(e)
            continue
        if value == decisive:
            return decisive
        outcomes.append(value)
    errors = [o for o in outcomes if isinstance(o, CelError)]
    if errors:
        raise errors[0]
    return not decisive


def _items(target):
    if kind(target) in ("list", "map"):
        return list(target)
    raise CelError(f"no such overload: a macro over a {kind(target)}")


def _macro(node, env):
    name, target, var, body = node[1], _eval(node[2], env), node[3], node[4]
    results = []
    for item in _items(target):
        scope = dict(env)
        scope[var] = item
        try:
            results.append((item, _truth(_eval(body, scope), name) if name != "map" or len(node) == 6
                            else _eval(body, scope), scope))
        except CelError as e:
            if name not in ("all", "exists"):
                raise
            results.append((item, e, scope))
    verdicts = [r[1] for r in results]
    errors = [v for v in verdicts if isinstance(v, CelError)]
    if name in ("all", "exists"):
        decisive = name == "exists"
        if decisive in verdicts:
            return decisive
        if errors:
            raise errors[0]
        return not decisive
    if name == "exists_one":
        return verdicts.count(True) == 1
    if name == "filter":
        return [item for item, keep, _ in results if keep]
    if len(node) == 6:  # map(x, predicate, transform)
        return [_eval(node[5], scope) for _, keep, scope in results if keep]
    return verdicts


def _call(node, env):
    name, target, args = node[1], node[2], node[3]
    fn, forms = FUNCTIONS.get(name, (None, set()))
    if fn is None or ("receiver" if target is not None else "global") not in forms:
        raise CelError(f"undeclared reference to function '{name}'")
    values = ([_eval(target, env)] if target is not None else []) + [_eval(a, env) for a in args]
    return fn(*values)


def _eval(node, env):
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "ident":
        if node[1] not in env:
            raise CelError(f"undeclared reference to '{node[1]}'")
        return env[node[1]]
    if op == "select":
        return _select(_eval(node[1], env), node[2])
    if op == "has":
        target = _eval(node[1], env)
        if isinstance(target, LazyVariables):
            return node[2] in target.trees
        if kind(target) != "map":
            raise CelError(f"has() of a field of a {kind(target)}")
        return node[2] in target
    if op == "index":
        return _index(_eval(node[1], env), _eval(node[2], env))
    if op == "list":
        return [_eval(x, env) for x in node[1]]
    if op == "map":
        out = {}
        for k, v in node[1]:
            key = _eval(k, env)
            if kind(key) not in ("string", "int", "bool") or key in out:
                raise CelError(f"bad map key {key!r}")
            out[key] = _eval(v, env)
        return out
    if op == "unary":
        value = _eval(node[2], env)
        if node[1] == "!":
            return not _truth(value, "!")
        if not _number(value):
            raise CelError(f"no such overload: -{kind(value)}")
        return _int(-value) if kind(value) == "int" else -value
    if op in ("and", "or"):
        return _logic(node, env)
    if op == "cond":
        return _eval(node[2] if _truth(_eval(node[1], env), "?:") else node[3], env)
    if op == "binary":
        return _binary(node[1], _eval(node[2], env), _eval(node[3], env))
    if op == "macro":
        return _macro(node, env)
    return _call(node, env)


def evaluate(tree_or_source, env):
    """The value of an expression (a tree from parse(), or source) over `env` (name ->
    value; Kubernetes' `variables` a LazyVariables). Raises CelError for an error value."""
    tree = parse(tree_or_source) if isinstance(tree_or_source, str) else tree_or_source
    return _eval(tree, env)


def check(tree, names, variables=()):
    """What a compiler would refuse in `tree` without running it: references to names not
    in `names` (besides macro variables), to `variables.X` for an X not in `variables`,
    and to functions this interpreter (or the form of call) does not know. A list of
    messages, empty when none."""
    problems = []

    def walk(node, scope):
        op = node[0]
        if op == "ident" and node[1] not in scope:
            problems.append(f"undeclared reference to '{node[1]}'")
        elif op == "select" and node[1] == ("ident", "variables") and node[2] not in variables:
            problems.append(f"undeclared variable '{node[2]}'")
        elif op == "call":
            forms = FUNCTIONS.get(node[1], (None, set()))[1]
            if ("receiver" if node[2] is not None else "global") not in forms:
                problems.append(f"undeclared reference to function '{node[1]}'")
        elif op == "macro":
            walk(node[2], scope)
            for body in node[4:]:
                walk(body, scope | {node[3]})
            return
        for child in node[1:]:
            if isinstance(child, tuple) and child and isinstance(child[0], str):
                walk(child, scope)
            elif isinstance(child, list):
                for c in child:
                    for part in (c if isinstance(c, tuple) and c and not isinstance(c[0], str) else (c,)):
                        walk(part, scope)

    walk(tree, set(names))
    return problems
