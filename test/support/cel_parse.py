"""The parsing half of cel.py (which see): CEL source to a tree of tuples.

The grammar is the CEL specification's (cel-spec, langdef.md); what is read and what is
refused is listed in cel.py.
"""
import re

__all__ = ["CelError", "parse", "INT_MIN", "INT_MAX"]

INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1


class CelError(Exception):
    """An evaluation error (a CEL error value), or a parse error."""


def _int(value):
    """`value` as a CEL int: 64-bit, overflow an error."""
    if not INT_MIN <= value <= INT_MAX:
        raise CelError("int overflow")
    return value


# ---- lexer ----

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*) |
    (?P<double>\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+) |
    (?P<hex>0x[0-9a-fA-F]+u?) |
    (?P<int>\d+u?) |
    (?P<string>[rR]?(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")) |
    (?P<bytes>[bB][rR]?['"]) |
    (?P<ident>[A-Za-z_][A-Za-z0-9_]*) |
    (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%!<>?:.,\[\]{}()])
""", re.VERBOSE | re.DOTALL)

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?"}
_RESERVED = {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop",
             "package", "namespace", "return", "var", "void", "while"}


def _unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1] if i + 1 < len(body) else ""
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "xX" or e in "uU":
            width = {"x": 2, "X": 2, "u": 4, "U": 8}[e]
            digits = body[i + 2:i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise CelError(f"bad escape \\{e}{digits}")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif e in "0123":
            digits = body[i + 1:i + 4]
            if len(digits) != 3 or not all(d in "01234567" for d in digits):
                raise CelError(f"bad octal escape \\{digits}")
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise CelError(f"bad escape \\{e}")
    return "".join(out)


def _string_value(text):
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    quote = 3 if text[:3] in ("'''", '"""') else 1
    body = text[quote:-quote]
    return body if raw else _unescape(body)


def _tokens(source):
    pos, out = 0, []
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if not m:
            raise CelError(f"unexpected character {source[pos]!r} at {pos}")
        kind, text = m.lastgroup, m.group()
        pos = m.end()
        if kind == "ws":
            continue
        if kind in ("bytes",) or (kind in ("int", "hex") and text.endswith("u")):
            raise CelError(f"{'bytes' if kind == 'bytes' else 'uint'} literals are not supported: {text}")
        if kind == "double":
            out.append(("lit", float(text)))
        elif kind in ("int", "hex"):
            out.append(("int", int(text, 16 if kind == "hex" else 10)))  # range checked with its sign
        elif kind == "string":
            out.append(("lit", _string_value(text)))
        elif kind == "ident" and text in ("true", "false", "null"):
            out.append(("lit", {"true": True, "false": False, "null": None}[text]))
        elif kind == "ident" and text == "in":
            out.append(("op", "in"))
        elif kind == "ident":
            if text in _RESERVED:
                raise CelError(f"reserved word {text}")
            out.append(("ident", text))
        else:
            out.append(("op", text))
    out.append(("end", None))
    return out


# ---- parser: source -> tree of tuples ----

_MACROS = {"all", "exists", "exists_one", "map", "filter"}
_RELATIONS = ("==", "!=", "<", "<=", ">", ">=", "in")


class _Parser:
    def __init__(self, source):
        self.toks = _tokens(source)
        self.i = 0

    def peek(self, *ops):
        kind, text = self.toks[self.i]
        return kind == "op" and (not ops or text in ops)

    def take(self, op=None):
        kind, text = self.toks[self.i]
        if op is not None and (kind != "op" or text != op):
            raise CelError(f"expected {op!r}, found {text!r}")
        self.i += 1
        return kind, text

    def expr(self):
        cond = self.binary(0)
        if self.peek("?"):
            self.take()
            then = self.binary(0)
            self.take(":")
            return ("cond", cond, then, self.expr())
        return cond

    # Levels, loosest first: ||, &&, relations, + -, * / %.
    _LEVELS = (("||",), ("&&",), _RELATIONS, ("+", "-"), ("*", "/", "%"))

    def binary(self, level):
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek(*self._LEVELS[level]):
            op = self.take()[1]
            right = self.binary(level + 1)
            left = ("or" if op == "||" else "and" if op == "&&" else "binary", *(() if op in ("||", "&&") else (op,)),
                    left, right)
        return left

    def unary(self):
        return self.literal(self.signed())

    def signed(self):
        if self.peek("!", "-"):
            op = self.take()[1]
            operand = self.signed()
            if op == "-" and operand[0] == "int":  # -9223372036854775808 is an int literal
                return ("int", -operand[1])
            return ("unary", op, self.literal(operand))
        return self.member()

    @staticmethod
    def literal(node):
        return ("lit", _int(node[1])) if node[0] == "int" else node

    def args(self, close):
        items = []
        while not self.peek(close):
            items.append(self.expr())
            if not self.peek(close):
                self.take(",")
        self.take(close)
        return items

    def member(self):
        node = self.primary()
        if self.peek(".", "["):
            node = self.literal(node)
        while self.peek(".", "["):
            if self.take()[1] == "[":
                node = ("index", node, self.expr())
                self.take("]")
                continue
            kind, name = self.take()
            if kind != "ident":
                raise CelError(f"expected a field name after '.', found {name!r}")
            if self.peek("("):
                self.take()
                node = self.call(name, node, self.args(")"))
            else:
                node = ("select", node, name)
        return node

    def call(self, name, target, args):
        if target is not None and name in _MACROS:
            if len(args) not in (2, 3) or args[0][0] != "ident" or (len(args) == 3 and name != "map"):
                raise CelError(f"bad use of the macro {name}")
            return ("macro", name, target, args[0][1], *args[1:])
        if target is None and name == "has":
            if len(args) != 1 or args[0][0] != "select":
                raise CelError("has() takes one field selection, as has(a.b)")
            return ("has", args[0][1], args[0][2])
        return ("call", name, target, args)

    def primary(self):
        kind, value = self.take()
        if kind in ("lit", "int"):
            return (kind, value)
        if kind == "ident":
            if self.peek("("):
                self.take()
                return self.call(value, None, self.args(")"))
            return ("ident", value)
        if value == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if value == "[":
            return ("list", self.args("]"))
        if value == "{":
            entries = []
            while not self.peek("}"):
                key = self.expr()
                self.take(":")
                entries.append((key, self.expr()))
                if not self.peek("}"):
                    self.take(",")
            self.take("}")
            return ("map", entries)
        raise CelError(f"unexpected {value!r}")


def parse(source):
    """The tree of `source`; CelError when it is not CEL this interpreter reads."""
    p = _Parser(source)
    tree = p.expr()
    if p.toks[p.i][0] != "end":
        raise CelError(f"unexpected {p.toks[p.i][1]!r} after the expression")
    return tree
