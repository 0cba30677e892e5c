#!/usr/bin/env bash
# Check a Grafana dashboard (the JSON model) against Grafana's published schema, the TypeScript
# types of the npm package @grafana/schema (generated there from Grafana's CUE schema).
#
#   bash scripts/dashboard-check.sh [DASHBOARD.json]    default packaging/grafana/tally.json
#   bash scripts/dashboard-check.sh --self-test [DASHBOARD.json]
#
# How: the dashboard is split into object literals, each assigned to a typed const in a generated
# .ts file, which the TypeScript compiler checks with --strict and exactOptionalPropertyTypes.
# Object literals are "fresh", so an unknown property is an error, as are a wrong type, a
# missing required property and a value outside an enum or union. What is checked against what:
#   - the dashboard without its panels: Dashboard (templating variables: VariableModel,
#     annotations: AnnotationQuery, time, timepicker, ...);
#   - each row: RowPanel; each other panel (also those inside collapsed rows): Panel, with
#     `options` and `fieldConfig.defaults.custom` typed by the panel plugin's Options and
#     FieldConfig that the package publishes for it (timeseries, stat, table, bargauge, ...;
#     a panel type it has none for is checked against Panel alone, and said so);
#   - each target: DataQuery; a Prometheus one (its or its panel's datasource type is
#     "prometheus") also with the Prometheus query fields, which @grafana/schema does not
#     publish: they are copied below from @grafana/prometheus's dataquery.d.ts (same release).
# The generated types are "as JSON": string enums become their string values.
# Not covered by the schema: PromQL, transformation and matcher options, override property
# values, the query variable's query, and what a Grafana release does with newer fields. Tally's
# own rules are checked too: every panel and target uses the datasource
# {"type":"prometheus","uid":"${datasource}"}, panel ids are unique, gridPos fits 24 columns.
#
# --self-test: mutate copies of the dashboard (wrong types, unknown properties, bad enum values,
# a missing required property, a bad datasource, ...), and check that each one is rejected, at
# the place mutated, and that the dashboard itself passes.
#
# Needs node and npm: when npm is missing it is installed from Debian (nodejs npm, without
# recommends; as root). The pinned @grafana/schema and typescript are installed once into
# $TALLY_NPM_DIR/<versions> (default /var/tmp/tally-npm) and reused.
# Exit status: 0 valid, 1 invalid (or self-test failed), 2 usage or setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "dashboard-check.sh: $*" >&2; exit 2; }

# Both support node >= 14.17 (typescript) / have no engines field (@grafana/schema: types only),
# so Debian 12's node 18 and npm 9.2 do.
GRAFANA_SCHEMA_VERSION=13.2.3
TYPESCRIPT_VERSION=5.9.3
NPM_DIR=${TALLY_NPM_DIR:-/var/tmp/tally-npm}
DEPS=$NPM_DIR/grafana-schema-$GRAFANA_SCHEMA_VERSION-typescript-$TYPESCRIPT_VERSION

mode=check
if [[ ${1:-} == --self-test ]]; then mode=self-test; shift; fi
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
[[ ${1:-} == -* ]] && die "unknown option $1 (usage: dashboard-check.sh [--self-test] [DASHBOARD.json])"
(( $# <= 1 )) || die "usage: dashboard-check.sh [--self-test] [DASHBOARD.json]"
dashboard=${1:-packaging/grafana/tally.json}
if [[ ! -e $dashboard && $dashboard != /* && -e $ROOT/$dashboard ]]; then
    display=$dashboard; dashboard=$ROOT/$dashboard
else
    display=$dashboard
fi
[[ -r $dashboard ]] || die "cannot read $dashboard"
dashboard=$(cd "$(dirname "$dashboard")" && pwd)/$(basename "$dashboard")

# ---- node and npm ------------------------------------------------------------------------------
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    (( EUID == 0 )) || die "node and npm are needed: apt-get install nodejs npm (as root)"
    echo "dashboard-check.sh: installing Debian's nodejs and npm" >&2
    log=$(mktemp)
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nodejs npm
         } >"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"; die "apt-get install nodejs npm failed"
    fi
    rm -f "$log"
fi

# ---- the pinned packages, installed once -------------------------------------------------------
installed_version() { # DIR PACKAGE: the version in DIR/node_modules/PACKAGE/package.json
    node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
        "$1/node_modules/$2/package.json"
}
deps_ok() {
    [[ -f $1/.complete ]] &&
        [[ $(installed_version "$1" @grafana/schema) == "$GRAFANA_SCHEMA_VERSION" ]] &&
        [[ $(installed_version "$1" typescript) == "$TYPESCRIPT_VERSION" ]]
}
if ! deps_ok "$DEPS"; then
    mkdir -p "$NPM_DIR"
    # Into a fresh dir first, renamed into place when complete: no half-installed cache, and two
    # runs at once do not share a dir (the second rename fails, and its copy is dropped).
    tmp=$(mktemp -d "$NPM_DIR/.install.XXXXXX")
    echo "dashboard-check.sh: npm install @grafana/schema@$GRAFANA_SCHEMA_VERSION typescript@$TYPESCRIPT_VERSION into $DEPS" >&2
    if ! npm install --no-audit --no-fund --ignore-scripts --save-exact --prefix "$tmp" \
            "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "typescript@$TYPESCRIPT_VERSION" >"$tmp/npm.log" 2>&1; then
        cat "$tmp/npm.log" >&2; rm -rf "$tmp"; die "npm install failed"
    fi
    touch "$tmp/.complete"
    deps_ok "$tmp" || { rm -rf "$tmp"; die "npm installed other versions than the pinned ones"; }
    mv -T "$tmp" "$DEPS" 2>/dev/null || rm -rf "$tmp"
    deps_ok "$DEPS" || die "$DEPS is not a complete install: remove it and run again"
fi

# ---- the check ---------------------------------------------------------------------------------
# The generated files live in a dir inside $DEPS so that `@grafana/schema` resolves to its
# node_modules; removed afterwards unless the check failed (then its path is printed).
find "$DEPS" -maxdepth 1 -name 'check.*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true # kept by old failures
work=$(mktemp -d "$DEPS/check.XXXXXX")
keep=0
trap '(( keep )) || rm -rf "$work"' EXIT

cat >"$work/check.js" <<'JS'
'use strict';
const fs = require('fs');
const path = require('path');
const ts = require('typescript');

const [mode, dashboardFile, display, schemaVersion] = process.argv.slice(2);
const work = __dirname;
const DS = { type: 'prometheus', uid: '${datasource}' };
const clone = (x) => JSON.parse(JSON.stringify(x));

// ---- the panel plugins @grafana/schema publishes Options / FieldConfig for -------------------
const schemaPkgDir = path.dirname(require.resolve('@grafana/schema/package.json'));
const schemaPkg = require('@grafana/schema/package.json');
const pluginModules = {}; // panel type -> { spec, options, fieldConfig }
for (const key of Object.keys(schemaPkg.exports || {})) {
  const m = /^\.\/dist\/esm\/raw\/composable\/([a-z0-9]+)\/panelcfg\/x\/[A-Za-z0-9]+_types\.gen$/.exec(key);
  if (!m) continue;
  const dts = path.join(schemaPkgDir, schemaPkg.exports[key].types);
  if (!fs.existsSync(dts)) continue;
  const text = fs.readFileSync(dts, 'utf8');
  pluginModules[m[1]] = {
    spec: '@grafana/schema' + key.slice(1),
    options: /export (interface|type) Options\b/.test(text),
    fieldConfig: /export (interface|type) FieldConfig\b/.test(text),
  };
}
// Plugin ids whose schema folder has another name.
for (const [id, dir] of [['annolist', 'annotationslist']]) {
  if (pluginModules[dir]) pluginModules[id] = pluginModules[dir];
}
const ident = (t) => 'P_' + t.replace(/[^A-Za-z0-9]/g, '_');

function typesSource(panelTypes) {
  const lines = [
    '// Generated by scripts/dashboard-check.sh: the types each part of the dashboard is checked against.',
    "import type { Dashboard, Panel, RowPanel, FieldConfig, FieldConfigSource, DataQuery } from '@grafana/schema';",
  ];
  for (const t of panelTypes) {
    if (pluginModules[t]) lines.push(`import type * as ${ident(t)} from '${pluginModules[t].spec}';`);
  }
  lines.push(`
// The JSON view of a type: a string enum becomes the union of its values ("absolute", not
// ThresholdsMode.Absolute); everything else keeps its shape, optional and required properties.
type IsAny<T> = 0 extends 1 & T ? true : false;
export type J<T> = IsAny<T> extends true ? T
  : T extends string ? \`\${T}\`
  : T extends number | boolean | null | undefined ? T
  : T extends ReadonlyArray<infer U> ? Array<J<U>>
  : T extends object ? { [K in keyof T]: J<T[K]> }
  : T;

// Prometheus query fields, as in @grafana/prometheus ${schemaVersion} dist/types/dataquery.d.ts
// (interface Prometheus extends common.DataQuery): not part of @grafana/schema.
interface PrometheusQuery extends DataQuery {
  editorMode?: 'builder' | 'code';
  exemplar?: boolean;
  expr: string;
  format?: 'time_series' | 'table' | 'heatmap';
  instant?: boolean;
  intervalFactor?: number;
  legendFormat?: string;
  range?: boolean;
  scopes?: Array<unknown>;
  adhocFilters?: Array<unknown>;
  groupByKeys?: Array<string>;
}
export type PromTarget = J<PrometheusQuery>;
export type OtherTarget = J<DataQuery> & Record<string, unknown>;

// Panels and targets inside a panel, row or dashboard are checked one by one, each as its own
// literal: where they were, the literal has an empty array.
export type DashboardTop = J<Dashboard>;
export type Row = Omit<J<RowPanel>, 'panels'> & { panels: Array<unknown> };
type FieldConfigOf<F> = Omit<J<FieldConfigSource>, 'defaults'> & {
  defaults: Omit<J<FieldConfig>, 'custom'> & { custom?: J<F> };
};
export type PanelOf<O, F> = Omit<J<Panel>, 'options' | 'fieldConfig' | 'targets'> & {
  options?: J<O>;
  fieldConfig?: FieldConfigOf<F>;
  targets?: Array<unknown>;
};
export type GenericPanel = PanelOf<Record<string, unknown>, Record<string, unknown>>;`);
  for (const t of panelTypes) {
    const m = pluginModules[t];
    if (!m) continue;
    const o = m.options ? `${ident(t)}.Options` : 'Record<string, unknown>';
    const f = m.fieldConfig ? `${ident(t)}.FieldConfig` : 'Record<string, unknown>';
    lines.push(`export type Panel_${ident(t)} = PanelOf<${o}, ${f}>;`);
  }
  return lines.join('\n') + '\n';
}

// ---- splitting a dashboard into checked literals ---------------------------------------------
// Returns { literals: [{ name, type, at, title, value }], rules: [problems], generic: Set }.
function split(dash) {
  const literals = [];
  const rules = [];
  const generic = new Set();
  const ids = new Map();
  const isObj = (x) => x !== null && typeof x === 'object' && !Array.isArray(x);
  const dsIsOurs = (ds) => isObj(ds) && ds.type === DS.type && ds.uid === DS.uid && Object.keys(ds).length === 2;

  const top = clone(dash);
  if (isObj(top) && Array.isArray(top.panels)) top.panels = [];
  literals.push({ name: 'dashboard', type: 'DashboardTop', at: '', title: '', value: top });

  const panel = (p, at) => {
    if (!isObj(p)) {
      literals.push({ name: `p${literals.length}`, type: 'GenericPanel', at, title: '', value: p });
      return;
    }
    const title = typeof p.title === 'string' ? p.title : '';
    const isRow = p.type === 'row' && !at.includes('].panels[');
    const v = clone(p);
    if (isRow && Array.isArray(v.panels)) v.panels = [];
    if (!isRow && Array.isArray(v.targets)) v.targets = [];
    let type = 'GenericPanel';
    if (isRow) type = 'Row';
    else if (typeof p.type === 'string' && pluginModules[p.type]) type = `Panel_${ident(p.type)}`;
    else generic.add(String(p.type));
    literals.push({ name: `p${literals.length}`, type, at, title, value: v });

    // Tally's rules, not the schema's.
    if (typeof p.id === 'number') {
      if (ids.has(p.id)) rules.push({ at: `${at}.id`, title, msg: `panel id ${p.id} is also used at ${ids.get(p.id)}` });
      else ids.set(p.id, at);
    }
    const g = p.gridPos;
    if (isObj(g) && typeof g.x === 'number' && typeof g.w === 'number' && g.x + g.w > 24) {
      rules.push({ at: `${at}.gridPos`, title, msg: `x + w = ${g.x + g.w}: wider than the 24 columns of the grid` });
    }
    if (!isRow && !dsIsOurs(p.datasource)) {
      rules.push({ at: `${at}.datasource`, title, msg: `tally rule: the datasource must be ${JSON.stringify(DS)}` });
    }
    if (isRow && p.datasource !== undefined && p.datasource !== null && !dsIsOurs(p.datasource)) {
      rules.push({ at: `${at}.datasource`, title, msg: `tally rule: the datasource must be ${JSON.stringify(DS)} (or none on a row)` });
    }
    if (isRow && Array.isArray(p.panels)) p.panels.forEach((c, j) => panel(c, `${at}.panels[${j}]`));
    if (!isRow && Array.isArray(p.targets)) {
      p.targets.forEach((t, j) => {
        const tat = `${at}.targets[${j}]`;
        const ds = isObj(t) && t.datasource !== undefined ? t.datasource : p.datasource;
        const prom = isObj(ds) && ds.type === 'prometheus';
        literals.push({ name: `p${literals.length}`, type: prom ? 'PromTarget' : 'OtherTarget', at: tat, title, value: t });
        if (!isObj(t) || !dsIsOurs(t.datasource)) {
          rules.push({ at: `${tat}.datasource`, title, msg: `tally rule: the datasource must be ${JSON.stringify(DS)}` });
        }
      });
    }
  };
  if (isObj(dash) && Array.isArray(dash.panels)) dash.panels.forEach((p, i) => panel(p, `panels[${i}]`));
  return { literals, rules, generic };
}

function docSource(literals, label) {
  const types = [...new Set(literals.map((l) => l.type))].sort();
  let s = `// Generated by scripts/dashboard-check.sh from ${label}\n`;
  s += `import type { ${types.join(', ')} } from './types';\n`;
  for (const l of literals) {
    s += `\n// @at ${l.at || '(dashboard)'}\nexport const ${l.name}: ${l.type} = ${JSON.stringify(l.value, null, 2)};\n`;
  }
  return s;
}

// ---- compiling -------------------------------------------------------------------------------
const tsconfig = {
  compilerOptions: {
    strict: true,
    exactOptionalPropertyTypes: true,
    noEmit: true,
    skipLibCheck: true,
    target: 'es2022',
    lib: ['es2022'],
    module: 'esnext',
    moduleResolution: 'bundler',
    types: [],
  },
};

// docs: [{ file, label, literals }] -> Map(file -> [{ at, title, msg }])
function compile(docs, panelTypes) {
  fs.writeFileSync(path.join(work, 'types.ts'), typesSource(panelTypes));
  for (const d of docs) fs.writeFileSync(path.join(work, d.file), docSource(d.literals, d.label));
  fs.writeFileSync(path.join(work, 'tsconfig.json'),
    JSON.stringify({ ...tsconfig, files: ['types.ts', ...docs.map((d) => d.file)] }, null, 2) + '\n');
  const cfg = ts.getParsedCommandLineOfConfigFile(path.join(work, 'tsconfig.json'), {}, {
    ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); },
  });
  if (cfg.errors.length) throw new Error(cfg.errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n'));
  const program = ts.createProgram({ rootNames: cfg.fileNames, options: cfg.options });
  const diags = ts.getPreEmitDiagnostics(program);
  const out = new Map(docs.map((d) => [d.file, []]));
  for (const diag of diags) {
    const msg = ts.flattenDiagnosticMessageText(diag.messageText, '\n    ');
    const base = diag.file && path.basename(diag.file.fileName);
    const doc = docs.find((d) => d.file === base);
    if (!doc) { // in types.ts or a library: a problem of the check itself
      const where = diag.file ? `${diag.file.fileName}:${diag.file.getLineAndCharacterOfPosition(diag.start).line + 1}` : '';
      throw new Error(`the generated types do not compile: ${where} ${msg}`);
    }
    out.get(doc.file).push(locate(diag.file, diag.start, doc.literals, msg));
  }
  return out;
}

// Where in the dashboard a diagnostic is: the const it is in, then the property names and array
// indexes from the const's initializer down to the node at the diagnostic's position.
function locate(sf, pos, literals, msg) {
  let decl;
  for (const st of sf.statements) {
    if (ts.isVariableStatement(st) && st.getStart(sf) <= pos && pos < st.end) decl = st.declarationList.declarations[0];
  }
  if (!decl) return { at: '?', title: '', msg };
  const lit = literals.find((l) => l.name === decl.name.text);
  let node = decl.initializer;
  const steps = [];
  if (node && node.getStart(sf) <= pos && pos < node.end) {
    for (;;) {
      let next;
      if (ts.isObjectLiteralExpression(node)) {
        for (const prop of node.properties) {
          if (prop.getStart(sf) <= pos && pos < prop.end) {
            const k = prop.name.text;
            steps.push(/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`);
            next = prop.initializer;
          }
        }
      } else if (ts.isArrayLiteralExpression(node)) {
        node.elements.forEach((e, i) => {
          if (e.getStart(sf) <= pos && pos < e.end) { steps.push(`[${i}]`); next = e; }
        });
      }
      if (!next || !(next.getStart(sf) <= pos && pos < next.end)) break;
      node = next;
    }
  }
  let at = (lit.at || '') + steps.join('');
  if (at.startsWith('.')) at = at.slice(1);
  return { at: at || '(dashboard)', title: lit.title, msg };
}

// TypeScript spells out whole types in its messages: long ones are cut.
const short = (msg) => msg.replace(/'([^'\n]{100,})'/g, (m, t) => `'${t.slice(0, 60)}…'`);
const fmt = (p) => `${p.at}${p.title ? ` (${JSON.stringify(p.title)})` : ''}: ${short(p.msg)}`;

// ---- self-test mutations ---------------------------------------------------------------------
function panels(d) { // [path, panel] of every panel, rows' children included
  const all = [];
  (d.panels || []).forEach((p, i) => {
    all.push([`panels[${i}]`, p]);
    if (p.type === 'row') (p.panels || []).forEach((c, j) => all.push([`panels[${i}].panels[${j}]`, c]));
  });
  return all;
}
function first(d, pred, what) {
  const hit = panels(d).find(([, p]) => pred(p));
  if (!hit) throw new Error(`self-test: the dashboard has no ${what} to mutate`);
  return hit;
}
const MUTATIONS = [
  ['schemaVersion "x"', 'schemaVersion', (d) => { d.schemaVersion = 'x'; }],
  ['no schemaVersion', '(dashboard)', (d) => { delete d.schemaVersion; }],
  ['unknown dashboard property "titel"', 'titel', (d) => { d.titel = d.title; }],
  ['refresh 60 (number, not string)', 'refresh', (d) => { d.refresh = 60; }],
  ['graphTooltip 7 (no such DashboardCursorSync)', 'graphTooltip', (d) => { d.graphTooltip = 7; }],
  ['a panel with gridPos {"h": "tall"}', 'panels', (d) => {
    d.panels.push({ type: 'text', id: 9999, title: 'tall', datasource: clone(DS), gridPos: { h: 'tall' } });
    return `panels[${d.panels.length - 1}].gridPos`;
  }],
  ['variable of type "dropdown"', 'templating.list[0].type', (d) => { d.templating.list[0].type = 'dropdown'; }],
  ['variable with an unknown property "definition"', 'templating.list[0].definition', (d) => { d.templating.list[0].definition = 'x'; }],
  ['timeseries legend placement "middle"', '.options.legend.placement', (d) => {
    const [at, p] = first(d, (p) => p.type === 'timeseries', 'timeseries panel');
    p.options.legend.placement = 'middle';
    return `${at}.options.legend.placement`;
  }],
  ['timeseries custom.drawStyle "dots"', '.fieldConfig.defaults.custom.drawStyle', (d) => {
    const [at, p] = first(d, (p) => p.type === 'timeseries' && p.fieldConfig && p.fieldConfig.defaults.custom, 'timeseries panel with custom field config');
    p.fieldConfig.defaults.custom.drawStyle = 'dots';
    return `${at}.fieldConfig.defaults.custom.drawStyle`;
  }],
  ['thresholds mode "relative"', '.fieldConfig.defaults.thresholds.mode', (d) => {
    const [at, p] = first(d, (p) => p.fieldConfig && p.fieldConfig.defaults.thresholds, 'panel with thresholds');
    p.fieldConfig.defaults.thresholds.mode = 'relative';
    return `${at}.fieldConfig.defaults.thresholds.mode`;
  }],
  ['stat options without reduceOptions', '.options', (d) => {
    const [at, p] = first(d, (p) => p.type === 'stat', 'stat panel');
    delete p.options.reduceOptions;
    return `${at}.options`;
  }],
  ['table options with unknown "showHeaders"', '.options.showHeaders', (d) => {
    const [at, p] = first(d, (p) => p.type === 'table', 'table panel');
    p.options.showHeaders = true;
    return `${at}.options.showHeaders`;
  }],
  ['target with "exprr" for "expr"', '.targets[0]', (d) => {
    const [at, p] = first(d, (p) => p.type !== 'row' && (p.targets || []).length, 'panel with targets');
    p.targets[0].exprr = p.targets[0].expr;
    delete p.targets[0].expr;
    return `${at}.targets[0]`;
  }],
  ['target with instant "yes"', '.targets[0].instant', (d) => {
    const [at, p] = first(d, (p) => p.type !== 'row' && (p.targets || []).length, 'panel with targets');
    p.targets[0].instant = 'yes';
    return `${at}.targets[0].instant`;
  }],
  ['panel inside a collapsed row with gridPos.w "wide"', '.gridPos.w', (d) => {
    const hit = panels(d).find(([a]) => a.includes('].panels['));
    if (!hit) throw new Error('self-test: the dashboard has no panel inside a row to mutate');
    hit[1].gridPos.w = 'wide';
    return `${hit[0]}.gridPos.w`;
  }],
  ['row with collapsed "no"', '.collapsed', (d) => {
    const [at, p] = first(d, (p) => p.type === 'row', 'row');
    p.collapsed = 'no';
    return `${at}.collapsed`;
  }],
  ['tally rule: panel datasource uid "prometheus"', '.datasource', (d) => {
    const [at, p] = first(d, (p) => p.type !== 'row', 'panel');
    p.datasource = { type: 'prometheus', uid: 'prometheus' };
    return `${at}.datasource`;
  }],
  ['tally rule: duplicate panel id', '.id', (d) => {
    const all = panels(d).filter(([, p]) => p.type !== 'row');
    all[1][1].id = all[0][1].id;
    return `${all[1][0]}.id`;
  }],
];

// ---- main ------------------------------------------------------------------------------------
function main() {
  let dash;
  try {
    dash = JSON.parse(fs.readFileSync(dashboardFile, 'utf8'));
  } catch (e) {
    console.log(`${display}: not JSON: ${e.message.replace(/\s*\n\s*/g, ' ')}`);
    return 1;
  }
  const docs = [{ file: 'dashboard.ts', label: display, ...split(dash) }];
  if (mode === 'self-test') {
    MUTATIONS.forEach(([what, at, mutate], i) => {
      const d = clone(dash);
      const want = mutate(d) || at;
      docs.push({ file: `mutation${String(i + 1).padStart(2, '0')}.ts`, label: `${display} mutated: ${what}`, what, want, ...split(d) });
    });
  }
  const panelTypes = [...new Set(docs.flatMap((d) => d.literals.map((l) => l.value && l.value.type))
    .filter((t) => typeof t === 'string' && pluginModules[t]))].sort();
  const result = compile(docs, panelTypes);

  const problems = (d) => [...result.get(d.file), ...d.rules];
  const real = problems(docs[0]);
  const generic = [...docs[0].generic].filter((t) => t !== 'row');
  if (generic.length) console.log(`${display}: note: no options schema published for panel type(s) ${generic.join(', ')}: checked against Panel only`);
  if (mode !== 'self-test') {
    if (real.length) {
      for (const p of real) console.log(`${display}: ${fmt(p)}`);
      console.log(`${display}: INVALID against @grafana/schema ${schemaVersion} Dashboard (${real.length} problem${real.length > 1 ? 's' : ''})`);
      return 1;
    }
    console.log(`${display}: valid against @grafana/schema ${schemaVersion} Dashboard`);
    return 0;
  }
  let missed = 0;
  for (const d of docs.slice(1)) {
    const ps = problems(d);
    const hit = ps.find((p) => p.at === d.want || p.at.startsWith(d.want + '.') || p.at.startsWith(d.want + '['));
    if (hit) {
      console.log(`ok: rejected ${d.what}: ${fmt(hit)}`.replace(/\n\s*/g, ' '));
    } else {
      missed++;
      console.log(`FAIL: not rejected at ${d.want}: ${d.what}${ps.length ? ` (other problems: ${ps.map(fmt).join('; ')})` : ''}`);
    }
  }
  if (real.length) {
    for (const p of real) console.log(`${display}: ${fmt(p)}`);
    console.log(`FAIL: ${display} itself is invalid`);
  } else {
    console.log(`ok: ${display} itself is valid`);
  }
  const n = docs.length - 1;
  console.log(`self-test: ${n - missed} of ${n} mutations rejected, ${display} ${real.length ? 'INVALID' : 'valid'} against @grafana/schema ${schemaVersion} Dashboard`);
  return missed || real.length ? 1 : 0;
}

try {
  process.exitCode = main();
} catch (e) {
  console.error(`dashboard-check.sh: ${e.message}`);
  process.exitCode = 2;
}
JS

rc=0
node "$work/check.js" "$mode" "$dashboard" "$display" "$GRAFANA_SCHEMA_VERSION" || rc=$?
if (( rc != 0 )) && [[ -f $work/tsconfig.json ]]; then
    # shellcheck disable=SC2034 # read by the EXIT trap
    keep=1
    echo "dashboard-check.sh: the generated TypeScript is kept in $work (re-run: $DEPS/node_modules/.bin/tsc -p $work)" >&2
fi
exit "$rc"
