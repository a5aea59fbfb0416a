#!/usr/bin/env python3
"""Every Kubernetes object in deploy/ against its published schema, strictly.

usage: check_schemas.py SOURCE_DIR [--self-test]

Each YAML document with apiVersion and kind in a file under deploy/ is validated against
the schema of its kind: the Kubernetes OpenAPI v3 schemas (every object against both kept
releases, test/deploy/schemas/kubernetes-*.json) or the CRD schema kept for it
(prometheus-operator's ServiceMonitor and PrometheusRule, the Node Readiness Controller's
NodeReadinessRule). Strictly, as `kubectl apply --validate=strict` does: an unknown field,
a duplicate key, a wrong type, a missing required field, a value outside an enum, pattern,
length or bound is an error. A kind with no kept schema is an error too. A document without
apiVersion and kind is one only under deploy/kubernetes/ and deploy/consumers/ (the alert
rules files are checked by promtool). Not checked: CEL rules (x-kubernetes-validations) and
the API server's own validation beyond the schema (names, label syntax, cross-field rules).

--self-test also validates each file of test/deploy/bad-manifests/ and expects, for each
`# expect: TEXT` line in it, an error containing TEXT.

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import datetime
import json
import pathlib
import re
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

HERE = pathlib.Path(__file__).resolve().parent
SCHEMAS = HERE / "schemas"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STRICT_DIRS = ("deploy/kubernetes", "deploy/consumers")


class StrictLoader(yaml.SafeLoader):
    """Refuses a mapping with the same key twice (the API server's strict decoding does)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class Registry:
    """Schemas by (group, version, kind), in one or more Kubernetes releases."""

    def __init__(self):
        self.releases = {}   # release name -> {"schemas": components, "kinds": {gvk: name}}
        self.crds = {}       # gvk -> (schema, source file)

    def load(self):
        for path in sorted(SCHEMAS.glob("kubernetes-*.json")):
            schemas = json.loads(path.read_text())["components"]["schemas"]
            kinds = {(g["group"], g["version"], g["kind"]): name for name, s in schemas.items()
                     for g in s.get("x-kubernetes-group-version-kind", [])}
            self.releases[path.stem] = {"schemas": schemas, "kinds": kinds}
        for path in sorted(SCHEMAS.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            for v in crd["versions"]:
                self.crds[(crd["group"], v["name"], crd["names"]["kind"])] = (v["openAPIV3Schema"], path.name)
        if not self.releases:
            raise SystemExit(f"no kubernetes-*.json under {SCHEMAS}")
        return self


def gvk(obj):
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return group, version, str(obj.get("kind", ""))


def type_name(value):
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__)


class Validator:
    def __init__(self, components):
        self.components = components
        self.errors = []

    def resolve(self, schema):
        while "$ref" in schema:
            schema = self.components[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def matches(self, value, schema, path):
        """Whether value fits schema, errors discarded (for oneOf/anyOf)."""
        saved, self.errors = self.errors, []
        self.check(value, schema, path)
        ok = not self.errors
        self.errors = saved
        return ok

    def check(self, value, schema, path):
        schema = self.resolve(schema)
        for part in schema.get("allOf", []):
            self.check(value, part, path)
        if value is None:
            return  # null is an unset field to the API server
        if isinstance(value, (datetime.date, datetime.datetime)):
            value = value.isoformat()  # YAML timestamps are strings to Kubernetes
        for key in ("oneOf", "anyOf"):
            if key in schema and not any(self.matches(value, s, path) for s in schema[key]):
                kinds = "/".join(self.resolve(s).get("type", "?") for s in schema[key])
                self.errors.append(f"{path}: {type_name(value)} {value!r:.40} is none of {kinds}")
        if schema.get("x-kubernetes-int-or-string"):
            if not isinstance(value, (int, str)) or isinstance(value, bool):
                self.errors.append(f"{path}: expected an integer or a string, got {type_name(value)}")
            return
        expected = schema.get("type")
        ok_types = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                    "integer": (int,), "number": (int, float)}.get(expected)
        if ok_types and (not isinstance(value, ok_types) or (isinstance(value, bool) and expected != "boolean")):
            self.errors.append(f"{path}: expected {expected}, got {type_name(value)} {value!r:.40}")
            return
        if "enum" in schema and value not in schema["enum"]:
            self.errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
        if isinstance(value, str):
            if "pattern" in schema and not re.search(schema["pattern"], value):
                self.errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
            if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
                self.errors.append(f"{path}: length {len(value)} outside its bounds")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < schema.get("minimum", value) or value > schema.get("maximum", value):
                self.errors.append(f"{path}: {value} outside [{schema.get('minimum')}, {schema.get('maximum')}]")
        if isinstance(value, list):
            if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
                self.errors.append(f"{path}: {len(value)} items, outside its bounds")
            if "items" in schema:
                for i, item in enumerate(value):
                    self.check(item, schema["items"], f"{path}[{i}]")
        if isinstance(value, dict):
            self.check_object(value, schema, path)

    def check_object(self, value, schema, path):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        free = schema.get("x-kubernetes-preserve-unknown-fields") or (not properties and extra is None)
        for name in schema.get("required", []):
            if name not in value:
                self.errors.append(f"{path}: missing required field {name}")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in properties:
                self.check(item, properties[key], where)
            elif isinstance(extra, dict):
                self.check(item, extra, where)
            elif not (free or extra is True):
                self.errors.append(f"{where}: unknown field")


def validate(obj, registry):
    """Errors of one object against every schema kept for its kind."""
    key = gvk(obj)
    if key in registry.crds:
        schema, source = registry.crds[key]
        release = next(iter(registry.releases.values()))
        v = Validator(release["schemas"])
        schema = dict(schema, properties=dict(schema.get("properties", {}),
                                              metadata={"$ref": f"#/components/schemas/{OBJECT_META}"}))
        v.check(obj, schema, "")
        return [f"{e} ({source})" for e in v.errors], [source]
    errors, against = [], []
    for name, release in registry.releases.items():
        if key not in release["kinds"]:
            errors.append(f"{key[0] or 'core'}/{key[1]} {key[2]}: no schema in {name}")
            continue
        v = Validator(release["schemas"])
        v.check(obj, {"$ref": "#/components/schemas/" + release["kinds"][key]}, "")
        errors += [f"{e} ({name})" for e in v.errors]
        against.append(name)
    if not against and key not in registry.crds:
        errors = [f"{key[0] or 'core'}/{key[1]} {key[2]}: no schema kept for this kind"]
    return errors, against


def validate_file(path, rel, registry, strict):
    """(errors, objects validated) for one YAML file."""
    try:
        docs = [d for d in yaml.load_all(path.read_text(), Loader=StrictLoader) if d is not None]
    except yaml.YAMLError as e:
        return [f"{rel}: {' '.join(str(e).split())}"], 0
    errors, count = [], 0
    for i, doc in enumerate(docs):
        if not (isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc):
            if strict:
                errors.append(f"{rel}: document {i + 1} is not a Kubernetes object (no apiVersion/kind)")
            continue
        name = f"{doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
        errs, _ = validate(doc, registry)
        errors += [f"{rel}: {name}: {e}" for e in errs]
        count += 1
    return errors, count


def self_test(registry):
    failures, bad = [], sorted((HERE / "bad-manifests").glob("*.yaml"))
    if not bad:
        return ["self-test: no test/deploy/bad-manifests/*.yaml"]
    for path in bad:
        expected = re.findall(r"^# expect: (.+)$", path.read_text(), re.M)
        errors, _ = validate_file(path, path.name, registry, strict=True)
        if not expected:
            failures.append(f"self-test: {path.name} has no `# expect:` line")
        for text in expected:
            if not any(text in e for e in errors):
                failures.append(f"self-test: {path.name}: no error containing {text!r}; got {errors}")
    return failures


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    registry = Registry().load()
    errors, objects, files = [], 0, 0
    for path in sorted((root / "deploy").rglob("*.yaml")):
        rel = path.relative_to(root).as_posix()
        strict = rel.startswith(STRICT_DIRS)
        errs, count = validate_file(path, rel, registry, strict)
        errors += errs
        objects += count
        files += 1 if count else 0
    if objects == 0:
        errors.append("no Kubernetes object found under deploy/")
    if "--self-test" in sys.argv[2:]:
        errors += self_test(registry)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"{objects} objects in {files} files valid against {', '.join(registry.releases)} and the kept CRD schemas")
    return 0


if __name__ == "__main__":
    sys.exit(main())
