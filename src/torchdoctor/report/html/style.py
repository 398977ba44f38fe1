"""The page's stylesheet, scoped under `.tdr` so the same markup can sit inside a notebook
cell. Light and dark palettes follow `prefers-color-scheme`; print always uses the light one."""

LIGHT = """
  --bg:#ffffff; --fg:#1f2328; --muted:#59636e; --border:#d1d9e0; --panel:#f6f8fa; --grid:#e8ebef;
  --accent:#0969da; --sampled:#bc4c00; --warmup:#eef1f4; --band:rgba(9,105,218,.16); --window:rgba(9,105,218,.06);
  --eval:#8250df; --ckpt:#cf222e; --epoch:#1a7f37; --ref:#59636e;
  --high:#cf222e; --medium:#9a6700; --low:#0969da; --info:#59636e;
  --mark:#fff8c5; --changed:#9a6700;
"""

DARK = """
  --bg:#0d1117; --fg:#e6edf3; --muted:#9198a1; --border:#3d444d; --panel:#151b23; --grid:#262c36;
  --accent:#4493f8; --sampled:#f0883e; --warmup:#1b222c; --band:rgba(68,147,248,.22); --window:rgba(68,147,248,.08);
  --eval:#ab7df8; --ckpt:#f85149; --epoch:#3fb950; --ref:#9198a1;
  --high:#f85149; --medium:#d29922; --low:#4493f8; --info:#9198a1;
  --mark:#3b2e00; --changed:#d29922;
"""

CSS = """
.tdr {%(light)s
  --c-data:#d4a72c; --c-fwd:#4c8eda; --c-bwd:#57ab5a; --c-opt:#986ee2; --c-eval:#e0823d; --c-ckpt:#c94f6d;
  --c-log:#8b949e;
  color:var(--fg); background:var(--bg); font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  max-width:1000px; margin:0 auto; padding:24px 20px 48px;
}
@media (prefers-color-scheme: dark) { .tdr {%(dark)s} }
.tdr * { box-sizing:border-box; }
.tdr h1 { font-size:1.6em; margin:0 0 4px; overflow-wrap:anywhere; }
.tdr h2 { font-size:1.25em; margin:32px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--border); }
.tdr h3 { font-size:1.05em; margin:18px 0 6px; }
.tdr h4 { font-size:.95em; margin:14px 0 4px; }
.tdr a { color:var(--accent); }
.tdr code, .tdr pre { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:.88em; }
.tdr code { background:var(--panel); border:1px solid var(--border); border-radius:4px; padding:0 4px;
  overflow-wrap:anywhere; }
.tdr pre { background:var(--panel); border:1px solid var(--border); border-radius:6px; padding:10px 12px;
  overflow-x:auto; margin:8px 0; }
.tdr pre code { background:none; border:0; padding:0; }
.tdr .byline, .tdr .note, .tdr .basis, .tdr figcaption { color:var(--muted); }
.tdr p.warning { border-left:4px solid var(--changed); background:var(--mark); padding:6px 10px; margin:8px 0; }
.tdr .note, .tdr figcaption { font-size:.88em; }
.tdr .prose { white-space:pre-wrap; overflow-wrap:anywhere; margin:6px 0; }
.tdr .not-measured { color:var(--muted); font-style:italic; padding:10px 12px; border:1px dashed var(--border);
  border-radius:6px; }
.tdr .downsampled { border-left:3px solid var(--accent); padding-left:8px; }
.tdr .headline { font-size:1em; color:var(--fg); }
.tdr nav ol { columns:3; margin:8px 0; padding-left:20px; font-size:.9em; }
.tdr .facts { display:grid; grid-template-columns:repeat(auto-fill,minmax(220px,1fr)); gap:8px; margin:0; }
.tdr .facts div { background:var(--panel); border:1px solid var(--border); border-radius:6px; padding:6px 10px; }
.tdr .facts dt { color:var(--muted); font-size:.8em; }
.tdr .facts dd { margin:0; font-weight:600; overflow-wrap:anywhere; }
.tdr table.grid { border-collapse:collapse; width:100%%; margin:6px 0; font-size:.9em; }
.tdr table.grid th, .tdr table.grid td { border-bottom:1px solid var(--border); padding:4px 8px; text-align:left;
  vertical-align:top; overflow-wrap:anywhere; }
.tdr table.grid th { overflow-wrap:normal; word-break:keep-all; hyphens:none; }
.tdr .table-wrap { overflow-x:auto; }
.tdr p.run-line { font-size:1.05em; font-weight:600; margin:8px 0 2px; }
.tdr p.run-line.run-failed { color:var(--high); }
.tdr p.busy { margin:2px 0; }
.tdr table.grid .num { text-align:right; font-variant-numeric:tabular-nums; }
.tdr table.split { width:auto; min-width:50%%; }
.tdr svg.chart { display:block; width:100%%; height:auto; margin:4px 0; overflow:visible; }
.tdr svg text { fill:var(--muted); font:11px system-ui,sans-serif; }
.tdr svg .row-label, .tdr svg .value-label { fill:var(--fg); font-size:12px; }
.tdr svg .verdict { fill:var(--fg); font-size:12px; }
.tdr svg .grid { stroke:var(--grid); stroke-width:1; fill:none; }
.tdr svg .axis { stroke:var(--muted); stroke-width:1; fill:none; }
.tdr svg .series { fill:none; stroke-width:1.8; stroke-linejoin:round; }
.tdr svg .l-step, .tdr svg .l-util, .tdr svg .l-power, .tdr svg .l-clock, .tdr svg .l-mem { stroke:var(--accent); }
.tdr svg .bars-wait { fill:var(--c-data); stroke:none; } .tdr svg .bars-sampled { fill:var(--sampled); }
.tdr svg .off-top { fill:var(--fg); font-size:11px; }
.tdr svg .band { fill:var(--band); stroke:none; }
.tdr svg .warmup { fill:var(--warmup); }
.tdr svg .window { fill:var(--window); }
.tdr svg .dot { fill:var(--accent); stroke:var(--bg); stroke-width:1; }
.tdr svg .dot-sampled { fill:var(--sampled); }
.tdr svg .mk { stroke-width:1.5; stroke-dasharray:4 3; fill:none; }
.tdr svg .rug { stroke-width:1.2; fill:none; }
.tdr svg .mk-eval { stroke:var(--eval); } .tdr svg .mk-checkpoint { stroke:var(--ckpt); }
.tdr svg .mk-epoch { stroke:var(--epoch); } .tdr svg .mk-other { stroke:var(--ref); }
.tdr svg .ref { stroke:var(--ref); stroke-width:1; stroke-dasharray:2 3; fill:none; }
.tdr svg .ref-limit { stroke:var(--high); stroke-dasharray:6 3; stroke-width:1.5; }
.tdr svg .ref-reserved { stroke:var(--c-opt); stroke-dasharray:6 3; stroke-width:1.5; }
.tdr svg .ref-alloc { stroke:var(--c-bwd); stroke-dasharray:2 3; stroke-width:2; }
.tdr svg .whisker { stroke:var(--fg); stroke-width:1.5; fill:none; }
.tdr svg .bar-base { fill:var(--c-log); } .tdr svg .bar-run { fill:var(--accent); }
.tdr svg .bar-same { fill:var(--band); stroke:var(--accent); }
.tdr svg .l-fit { stroke:var(--c-opt); stroke-dasharray:6 3; }
.tdr svg .dot-fits { fill:var(--accent); stroke:var(--bg); } .tdr svg .dot-over { fill:var(--high); stroke:var(--bg); }
.tdr svg .dot-failed { fill:var(--ref); stroke:var(--bg); }
%(parts)s
.tdr .legend { list-style:none; display:flex; flex-wrap:wrap; gap:4px 16px; padding:0; margin:6px 0 0;
  font-size:.85em; color:var(--muted); }
.tdr .key { display:inline-block; width:14px; height:10px; margin-right:6px; vertical-align:baseline;
  border-radius:2px; }
.tdr .k-step, .tdr .k-line { background:var(--accent); height:3px; vertical-align:middle; }
.tdr .k-ref, .tdr .k-limit, .tdr .k-reserved, .tdr .k-alloc { height:0; border-top:2px dotted var(--ref);
  vertical-align:middle; border-radius:0; }
.tdr .k-limit { border-top:2px dashed var(--high); }
.tdr .k-reserved { border-top:2px dashed var(--c-opt); } .tdr .k-alloc { border-top:2px dotted var(--c-bwd); }
.tdr .k-window { background:var(--window); border:1px solid var(--border); }
.tdr .k-warmup { background:var(--warmup); border:1px solid var(--border); }
.tdr .k-band { background:var(--band); } .tdr .k-wait { background:var(--c-data); }
.tdr .k-sampled { background:var(--sampled); border-radius:50%%; width:10px; }
.tdr .k-eval, .tdr .k-checkpoint, .tdr .k-epoch, .tdr .k-other { width:3px; height:14px; vertical-align:middle; }
.tdr .k-eval { background:var(--eval); } .tdr .k-checkpoint { background:var(--ckpt); }
.tdr .k-epoch { background:var(--epoch); } .tdr .k-other { background:var(--ref); }
.tdr .k-base { background:var(--c-log); } .tdr .k-run { background:var(--accent); }
.tdr .k-fits, .tdr .k-over { border-radius:50%%; width:10px; } .tdr .k-fits { background:var(--accent); }
.tdr .k-over { background:var(--high); } .tdr .k-fit { height:0; border-top:2px dashed var(--c-opt); border-radius:0;
  vertical-align:middle; }
.tdr .k-same { background:var(--band); border:1px solid var(--accent); }
.tdr .badge { display:inline-block; font-size:.75em; font-weight:700; text-transform:uppercase; letter-spacing:.04em;
  padding:1px 8px; border-radius:10px; color:#fff; background:var(--info); }
.tdr .badge.sev-high { background:var(--high); } .tdr .badge.sev-medium { background:var(--medium); }
.tdr .badge.sev-low { background:var(--low); }
.tdr article.finding { border:1px solid var(--border); border-left:5px solid var(--info); border-radius:8px;
  padding:12px 16px; margin:16px 0; background:var(--bg); break-inside:avoid; }
.tdr article.sev-high { border-left-color:var(--high); } .tdr article.sev-medium { border-left-color:var(--medium); }
.tdr article.sev-low { border-left-color:var(--low); }
.tdr article.finding header { display:flex; flex-wrap:wrap; align-items:baseline; gap:6px 8px; }
.tdr article.finding header h3 { flex-basis:100%%; margin:4px 0 0; overflow-wrap:anywhere; }
.tdr .rank { font-weight:700; font-size:1.1em; color:var(--muted); }
.tdr .where { margin:6px 0; }
.tdr .estimate { margin:12px 0 0; padding-top:8px; border-top:1px solid var(--border); }
.tdr figure.source { margin:8px 0; }
.tdr figure.source pre { padding:6px 0; }
.tdr figure.source .line { display:block; padding:0 12px 0 0; white-space:pre; }
.tdr figure.source .line.hit { background:var(--mark); font-weight:600; }
.tdr figure.source .ln { display:inline-block; width:4.5em; padding-right:12px; text-align:right; color:var(--muted);
  user-select:none; }
.tdr .source-note { font-size:.88em; margin:4px 0; color:var(--muted); }
.tdr .source-note.status-changed, .tdr .source-note.status-missing { color:var(--changed); font-weight:600; }
.tdr ul.unmeasured li, .tdr ul.notes li { margin:4px 0; }
.tdr footer { margin-top:40px; font-size:.8em; color:var(--muted); }
@media print {
  .tdr {%(light)s max-width:none; padding:0; }
  .tdr nav { display:none; }
  .tdr h2 { break-after:avoid; }
  .tdr svg.chart, .tdr figure.source, .tdr table { break-inside:avoid; }
  .tdr * { -webkit-print-color-adjust:exact; print-color-adjust:exact; }
}
""" % {"light": LIGHT, "dark": DARK, "parts": "\n".join(
    f".tdr .c-{part} {{ fill:var(--c-{part}); background:var(--c-{part}); }}"  # a split part: SVG bar or legend key
    for part in ("data", "fwd", "bwd", "opt", "eval", "ckpt", "log"))}
