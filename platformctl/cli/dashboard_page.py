"""The dashboard's page: the data ``platformctl.app.dashboard.gather`` read, as HTML with plotly charts.

Every value from a user or a cluster goes through Jinja2's autoescaping (HTML) or ``script_json`` (JSON inside a
``<script type="application/json">``, where ``<``, ``>`` and ``&`` are written as ``\\u003c``…), so a note or a
reason holding ``<script>`` or ``onerror=`` is shown as text. The served page also sends a Content-Security-Policy
that allows no inline script; the export carries one that allows only its own scripts, by hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.utils import PlotlyJSONEncoder

from platformctl.kernel.humanize import human_duration

REFRESH_SECONDS = 5
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")

APP_JS = """
(function () {
  function figures() { return JSON.parse(document.getElementById('figures').textContent); }
  function draw() {
    var figs = figures();
    document.querySelectorAll('[data-figure]').forEach(function (el) {
      var f = figs[el.getAttribute('data-figure')];
      if (f) { Plotly.react(el, f.data, f.layout, {displaylogo: false, responsive: true}); }
    });
  }
  window.dashboardDraw = draw;
  function human(s) {
    s = Math.round(Math.abs(s));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return d ? d + 'd' + (h ? h + 'h' : '') : h ? h + 'h' + (m ? m + 'm' : '') : m ? m + 'm' : s + 's';
  }
  var loaded = Date.now();
  function countdowns() {  // each stage's clock when read, moved on by the time since the page was drawn
    document.querySelectorAll('[data-until]').forEach(function (el) {
      var left = Number(el.getAttribute('data-until')) - Number(el.getAttribute('data-clock')) - (Date.now() - loaded) / 1000;
      el.textContent = left > 0 ? 'in ' + human(left) : human(left) + ' ago';
    });
  }
  document.addEventListener('DOMContentLoaded', function () {
    draw();
    var body = document.body, refresh = body.getAttribute('data-refresh');
    if (!refresh) { return; }
    setInterval(countdowns, 1000);
    setInterval(function () {
      fetch('data.json?version=' + encodeURIComponent(body.getAttribute('data-version')), {cache: 'no-store'})
        .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
        .then(function (d) {
          document.getElementById('stale').hidden = true;
          if (d.version === body.getAttribute('data-version')) { return; }
          document.getElementById('dashboard').innerHTML = d.html;
          document.getElementById('figures').textContent = d.figures;
          body.setAttribute('data-version', d.version);
          loaded = Date.now();
          draw();
        })
        .catch(function () { document.getElementById('stale').hidden = false; });
    }, Number(refresh) * 1000);
  });
})();
"""

TEMPLATES = Path(__file__).parent / "templates"

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.ChainableUndefined)


def script_json(value: Any) -> str:
    """JSON to sit inside a ``<script>`` element: nothing in it can close the element or open a comment."""
    text = value if isinstance(value, str) else json.dumps(value, cls=PlotlyJSONEncoder, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _t(at: float | None) -> str:
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(at)))


def _left(until: float, now: float) -> str:
    return f"in {human_duration(until - now)}" if until > now else f"{human_duration(now - until)} ago"


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _dur(seconds: float | None) -> str:
    return "" if seconds is None else human_duration(float(seconds))


def _label(text: str) -> str:
    """A trace name plotly draws as SVG text: it reads a few tags (``<b>``, ``<a href>``), so none get through."""
    return text.replace("<", "\u2039").replace(">", "\u203a")


def figures(d: dict[str, Any]) -> dict[str, Any]:
    """Per stage, the latency (p50, p99) and success-rate charts, one colour per image, with the objectives."""
    out: dict[str, Any] = {}
    goals = d.get("objectives") or {}
    images = sorted({line["image"] for c in d["canaries"].values() for line in c.get("lines") or []})
    color = {image: COLORS[i % len(COLORS)] for i, image in enumerate(images)}
    for stage, c in d["canaries"].items():
        lines = c.get("lines") or []
        if not lines:
            continue
        x_range = [c["start"] * 1000, c["end"] * 1000]
        latency, success = go.Figure(), go.Figure()
        for line in lines:
            xs = [at * 1000 for at in line["at"]]
            name = _label(line["image"])
            latency.add_scatter(x=xs, y=line["p50"], mode="lines+markers", name=f"{name} p50", legendgroup=name,
                                line={"color": color[line["image"]]}, marker={"size": 4})
            latency.add_scatter(x=xs, y=line["p99"], mode="lines", name=f"{name} p99", legendgroup=name,
                                line={"color": color[line["image"]], "width": 1, "dash": "dot"})
            success.add_scatter(x=xs, y=line["success_rate"], mode="lines+markers", name=name,
                                line={"color": color[line["image"]]}, marker={"size": 4},
                                customdata=line["attempts"], hovertemplate="%{y:.1%} of %{customdata} attempts")
        if goals.get("pod_startup_p99_seconds") is not None:
            latency.add_hline(y=goals["pod_startup_p99_seconds"], line={"dash": "dash", "color": "#b3261e"},
                              annotation_text="p99 objective")
        if goals.get("success_rate") is not None:
            success.add_hline(y=goals["success_rate"], line={"dash": "dash", "color": "#b3261e"},
                              annotation_text="failure budget")
        common = {"margin": {"l": 50, "r": 10, "t": 30, "b": 40}, "legend": {"orientation": "h", "y": -0.2},
                  "xaxis": {"type": "date", "range": x_range}, "uirevision": stage}
        latency.update_layout(title=f"{stage}: pod startup (s)", yaxis={"rangemode": "tozero"}, **common)
        success.update_layout(title=f"{stage}: success rate", yaxis={"range": [0, 1.02], "tickformat": ".0%"}, **common)
        out[f"{stage}-latency"] = latency.to_plotly_json()
        out[f"{stage}-success"] = success.to_plotly_json()
    return out


def body(d: dict[str, Any]) -> str:
    return _env.get_template("dashboard_body.html.j2").render(d=d, t=_t, left=_left, num=_num, dur=_dur, window=human_duration(d["window_seconds"]),
                                         pretty=lambda v: json.dumps(v, indent=2, sort_keys=True, default=str))


def version(d: dict[str, Any]) -> str:
    """What changes when the stores do (not the time it was read at, nor the stages' clocks: the served page counts
    its countdowns down by itself)."""
    stable = {k: v for k, v in d.items() if k != "generated_at"}
    stable["stages"] = [{k: v for k, v in s.items() if k != "clock"} for s in d.get("stages", [])]
    stable["minute"] = int(d.get("generated_at", 0) // 60)  # what is said relative to now is redrawn once a minute
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]


def update(d: dict[str, Any]) -> dict[str, Any]:
    """What the served page's poll gets: the new body, the figures, and the version they are."""
    return {"version": version(d), "html": body(d), "figures": script_json(figures(d))}


@cache
def plotly_js() -> str:
    return get_plotlyjs()


def _sha256(code: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode()).digest()).decode() + "'"


def page(d: dict[str, Any], *, served: bool) -> str:
    """The whole page: served (scripts from the server, polling for changes) or exported (everything inlined)."""
    if served:
        scripts, inline, csp = ["plotly.js", "dashboard.js"], [], ""
    else:
        inline = [plotly_js(), APP_JS]
        csp = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; script-src "
               + " ".join(_sha256(code) for code in inline))
    return _env.get_template("dashboard.html.j2").render(csp=csp, script_srcs=scripts if served else [], inline_scripts=inline,
                                         refresh=REFRESH_SECONDS if served else None, version=version(d), body=body(d),
                                         figures_json=script_json(figures(d)))
