"""Running components and programs under Pulumi's mock runtime in tests.

Every run sets its own mocks (never module-level `set_mocks`), with preview=False so outputs
resolve, through automation.checks.offline, the same recorder `preview --offline` uses. Helpers
assert that something was registered, so no test can pass on an empty program.
"""

from __future__ import annotations

from automation.checks.offline import Registered, run, unwrap


def registered(program, stack: str = "test", config: dict | None = None, secret_keys: list[str] | None = None) -> list[Registered]:
    resources = run(program, "modelplane-test", stack, config or {}, secret_keys or [])
    assert resources, "the program registered nothing"
    return resources


def of_type(resources: list[Registered], type_: str) -> list[Registered]:
    return [r for r in resources if r.type == type_]


def named(resources: list[Registered], name: str, type_: str | None = None) -> Registered:
    found = [r for r in resources if r.name == name and (type_ is None or r.type == type_)]
    assert len(found) == 1, f"expected one resource named {name}, found {[r.type for r in found]}"
    return found[0]


def inputs(resource: Registered) -> dict:
    return unwrap(resource.inputs)
