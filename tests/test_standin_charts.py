"""The local fleet's stand-in charts (automation/local/standin_charts.py) put each chart's CRDs where the real chart
does: Helm leaves an existing CRD of a chart's crds/ folder alone, refuses one of its templates that the release does
not own, and deletes templated CRDs with the release unless they say keep (docs/platform.md)."""

from __future__ import annotations

import yaml

from automation.local.standin_charts import BUNDLED, TEMPLATED_CRDS, chart_files
from components.versions import CHARTS


def test_every_chart_whose_bundled_crds_are_templates_is_templated_by_its_stand_in():
    templated = {path.name for path in BUNDLED.glob("*.yaml") if "{{" in path.read_text()}
    assert templated  # cert-manager's files hold the chart's template text
    groups = {name.split("_", 1)[0] for name in templated}
    charts = {key for key, spec in CHARTS.items() if any(group in groups for group, _ in spec.crds)
              and not spec.skip_crds}
    assert charts == set(TEMPLATED_CRDS)


def test_cert_manager_s_stand_in_templates_its_crds_gated_and_kept_by_the_chart_s_values():
    files = chart_files(CHARTS["cert-manager"])
    assert "crds/crds.yaml" not in files
    text = files["templates/crds.yaml"]
    assert text.startswith("{{- if or .Values.crds.enabled .Values.installCRDs }}\n") and text.endswith("{{- end }}\n")
    # with the values the platform gives (crds.enabled, crds.keep), each CRD is installed and kept
    rendered = text.replace("{{- if or .Values.crds.enabled .Values.installCRDs }}\n", "").replace(
        "  {{- if .Values.crds.keep }}\n", "").replace("  {{- end }}\n", "").replace("{{- end }}\n", "")
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert {d["spec"]["names"]["kind"] for d in docs} == {kind for _, kind in CHARTS["cert-manager"].crds}
    assert all(d["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"} for d in docs)
    assert yaml.safe_load(files["values.yaml"])["crds"] == {"enabled": False, "keep": True}  # the chart's defaults


def test_a_chart_that_ships_crds_in_its_crds_folder_keeps_them_there():
    files = chart_files(CHARTS["lws"])  # lws 0.10.0: charts/lws/crds/
    assert "templates/crds.yaml" not in files
    assert [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(files["crds/crds.yaml"])] == ["LeaderWorkerSet"]
