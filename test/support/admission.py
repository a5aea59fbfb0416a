"""ValidatingAdmissionPolicy admission as the Kubernetes API server runs it, for the tests:
the policies and bindings of a manifest, compiled, then each request that a policy's
resource rules match goes through its matchConditions, variables and validations, with
the CEL of cel.py.

What the API server does, and so this (Kubernetes 1.30+, admissionregistration.k8s.io/v1):
- a policy applies to a request its matchConstraints.resourceRules match (group, version,
  resource[/subresource], operation) and that has a binding;
- matchConditions: all must be true, else the policy does not apply; one that errs follows
  failurePolicy (Fail: the request is denied);
- variables are evaluated lazily, on use, and may use the ones declared before them;
- each validation must be true; false denies, with its messageExpression's string when that
  evaluates to a non-empty one, else its message, else the failed expression; an error
  follows failurePolicy;
- a denial is the binding's validationActions' Deny: HTTP code from the validation's reason
  (Forbidden 403, Invalid 422 and the default, Unauthorized 401, RequestEntityTooLarge 413),
  message "ValidatingAdmissionPolicy 'P' with binding 'B' denied request: M".
Not modelled: paramKind/params, namespaceSelector/objectSelector, excludeResourceRules,
auditAnnotations, Warn/Audit actions (a binding without Deny denies nothing here), the
authorizer library. A manifest that uses one is refused by load(), rather than admitted.
"""
import cel

ROOT_NAMES = {"object", "oldObject", "request", "params", "namespaceObject", "variables"}
CODES = {"Forbidden": 403, "Invalid": 422, "Unauthorized": 401, "RequestEntityTooLarge": 413}


class Denied(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _compile(source, names, variables, where):
    try:
        tree = cel.parse(source)
    except cel.CelError as e:
        raise ValueError(f"{where}: does not compile: {e}") from e
    problems = cel.check(tree, names, variables)
    if problems:
        raise ValueError(f"{where}: does not compile: {'; '.join(problems)}")
    return tree


def _policy(doc, bindings):
    name, spec = doc["metadata"]["name"], doc["spec"]
    unsupported = {"paramKind", "auditAnnotations"} & spec.keys()
    unsupported |= {"namespaceSelector", "objectSelector", "excludeResourceRules"} & spec.get("matchConstraints", {}).keys()
    if unsupported:
        raise ValueError(f"{name}: uses {sorted(unsupported)}, which this admission does not model")
    variables, declared = {}, []
    for v in spec.get("variables", []):
        variables[v["name"]] = _compile(v["expression"], ROOT_NAMES, list(declared), f"{name}: variable {v['name']}")
        declared.append(v["name"])
    compile_all = lambda key, field: [  # noqa: E731
        dict(item, tree=_compile(item[field], ROOT_NAMES, declared, f"{name}: {key} {item[field]!r}"))
        for item in spec.get(key, [])]
    validations = compile_all("validations", "expression")
    for v in validations:
        if "messageExpression" in v:
            v["message_tree"] = _compile(v["messageExpression"], ROOT_NAMES, declared, f"{name}: messageExpression")
    return {"name": name, "rules": spec.get("matchConstraints", {}).get("resourceRules", []),
            "failure": spec.get("failurePolicy", "Fail"), "conditions": compile_all("matchConditions", "expression"),
            "variables": variables, "validations": validations,
            "bindings": [b["metadata"]["name"] for b in bindings
                         if b["spec"].get("policyName") == name and "Deny" in b["spec"].get("validationActions", [])]}


def load(docs):
    """The ValidatingAdmissionPolicies among `docs` (parsed manifests), compiled. ValueError
    for an expression that does not compile or a feature not modelled."""
    bindings = [d for d in docs if d and d.get("kind") == "ValidatingAdmissionPolicyBinding"]
    return [_policy(d, bindings) for d in docs if d and d.get("kind") == "ValidatingAdmissionPolicy"]


def _matches(rule, request):
    resource = request["resource"]["resource"] + ("/" + request["subResource"] if request.get("subResource") else "")
    return (request["resource"]["group"] in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])) and \
        (request["resource"]["version"] in rule.get("apiVersions", []) or "*" in rule.get("apiVersions", [])) and \
        (resource in rule.get("resources", []) or "*" in rule.get("resources", [])) and \
        (request["operation"] in rule.get("operations", []) or "*" in rule.get("operations", []))


def _deny(policy, binding, reason, message):
    raise Denied(CODES.get(reason, 422), reason or "Invalid",
                 f"ValidatingAdmissionPolicy '{policy['name']}' with binding '{binding}' denied request: {message}")


def _run(policy, binding, env):
    for c in policy["conditions"]:
        try:
            if not cel.evaluate(c["tree"], env):
                return
        except cel.CelError as e:
            if policy["failure"] == "Fail":
                _deny(policy, binding, "Invalid", f"failed to evaluate matchCondition {c['name']}: {e}")
            return
    for v in policy["validations"]:
        try:
            ok = cel.evaluate(v["tree"], env)
            if type(ok) is not bool:
                raise cel.CelError(f"expected a bool, got {cel.kind(ok)}")
        except cel.CelError as e:
            if policy["failure"] == "Fail":
                _deny(policy, binding, v.get("reason"), f"expression '{v['expression']}' resulted in error: {e}")
            continue
        if ok:
            continue
        message = v.get("message") or f"failed expression: {v['expression']}"
        if "message_tree" in v:
            try:
                text = cel.evaluate(v["message_tree"], env)
                message = text.strip() if isinstance(text, str) and text.strip() else message
            except cel.CelError:
                pass  # the API server falls back to message, as here
        _deny(policy, binding, v.get("reason"), message)


def admit(policies, request):
    """Raises Denied when a policy denies `request` (an admission.k8s.io AdmissionRequest as
    a dict: resource {group, version, resource}, subResource, operation, userInfo, object,
    oldObject, name, namespace); returns None when it is admitted."""
    for policy in policies:
        if not policy["bindings"] or not any(_matches(r, request) for r in policy["rules"]):
            continue
        for binding in policy["bindings"]:
            env = {"object": request.get("object"), "oldObject": request.get("oldObject"), "request": request,
                   "params": None, "namespaceObject": None}
            env["variables"] = cel.LazyVariables(policy["variables"], env)
            _run(policy, binding, env)


def user_info(username, extra=None, groups=()):
    """request.userInfo as the API server fills it from a token (extra absent when empty)."""
    info = {"username": username, "groups": list(groups)}
    if extra:
        info["extra"] = {k: list(v) for k, v in extra.items()}
    return info


def status_update(resource, name, old, new, user, namespace=""):
    """The AdmissionRequest of an UPDATE (a PATCH is one) of `resource`/status."""
    request = {"kind": {"group": "", "version": "v1", "kind": "Node" if resource == "nodes" else "Pod"},
               "resource": {"group": "", "version": "v1", "resource": resource}, "subResource": "status",
               "name": name, "operation": "UPDATE", "userInfo": user, "object": new, "oldObject": old}
    if namespace:
        request["namespace"] = namespace
    return request
