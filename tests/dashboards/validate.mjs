// Validates dashboards/*.json against Grafana's own dashboard schema.
//
// Grafana publishes its dashboard schema in the npm package @grafana/schema
// as TypeScript types generated from its CUE definitions (the package has no
// JSON Schema, and Grafana's dashboard linter is not installable here). So
// each dashboard becomes a TypeScript object literal typed as that schema,
// and the TypeScript compiler checks it: the dashboard model (Dashboard,
// Panel, RowPanel, VariableModel, FieldConfig...), and for each panel its
// plugin's own options and field-config types (TimeSeries, Stat, Heatmap,
// BarGauge, PieChart panel configs). Object literals get TypeScript's
// excess-property check, so a misspelt or unknown key fails as well as a
// wrong type or enum value. String enums are compared by value (JSON has no
// enums), numeric ones by member value.
//
// A self-test plants known mistakes in copies of the first dashboard and
// requires each to be caught, so the check cannot pass by checking nothing.
//
// Usage: node validate.mjs DASHBOARD_DIR
// Prints a JSON summary on stdout; exits 1 on any error.

import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import ts from 'typescript';

const here = dirname(fileURLToPath(import.meta.url));
const dashDir = resolve(process.argv[2] ?? join(here, '../../dashboards'));
// Generated sources go to a scratch directory whose node_modules points at
// ours, so that the checkout need not be writable.
const genDir = mkdtempSync(join(tmpdir(), 'tlsrum-dashboards-'));
symlinkSync(join(here, 'node_modules'), join(genDir, 'node_modules'), 'dir');

const PANELCFG = {
  timeseries: ['TimeSeriesPanelCfg', true],
  stat: ['StatPanelCfg', false],
  heatmap: ['HeatmapPanelCfg', true],
  bargauge: ['BarGaugePanelCfg', false],
  piechart: ['PieChartPanelCfg', true],
  table: ['TablePanelCfg', true],
  histogram: ['HistogramPanelCfg', true],
  barchart: ['BarChartPanelCfg', true],
  gauge: ['GaugePanelCfg', false],
  text: ['TextPanelCfg', false],
};

const errors = [];
const fail = (msg) => errors.push(msg);

// 1. The committed JSON is what the generator makes.
try {
  execFileSync(process.execPath, [join(dashDir, 'generate.mjs'), '--check'], { stdio: ['ignore', 'pipe', 'pipe'] });
} catch (e) {
  fail(`generate.mjs --check: ${e.stderr?.toString().trim() || e.message}`);
}

// 2. TypeScript sources, one per dashboard.
const header = `import type { Dashboard } from '@grafana/schema';
// JSON has no enums: compare string enums by value.
type Loosen<T> = T extends string ? \`\${T}\`
  : T extends number | boolean | null | undefined ? T
  : T extends Array<infer U> ? Array<Loosen<U>>
  : T extends object ? { [K in keyof T]: Loosen<T[K]> }
  : T;
`;

function tsSource(dash) {
  const lines = [header];
  const used = new Set();
  const panels = [];
  for (const p of dash.panels ?? []) {
    panels.push(p);
    if (p.type === 'row') panels.push(...(p.panels ?? []));
  }
  const body = [`export const dashboard: Loosen<Dashboard> = ${JSON.stringify(dash, null, 2)};`];
  for (const p of panels) {
    if (p.type === 'row') continue;
    const cfg = PANELCFG[p.type];
    if (!cfg) {
      fail(`${dash.uid}: panel ${p.id} "${p.title}": no schema known for panel type ${p.type}`);
      continue;
    }
    const [mod, hasFieldConfig] = cfg;
    const alias = `${p.type}Cfg`;
    if (!used.has(p.type)) {
      used.add(p.type);
      lines.push(`import type * as ${alias} from '@grafana/schema/dist/esm/raw/composable/${p.type}/panelcfg/x/${mod}_types.gen';`);
    }
    body.push(`export const panel${p.id}_options: Loosen<${alias}.Options> = ${JSON.stringify(p.options ?? {}, null, 2)};`);
    const custom = p.fieldConfig?.defaults?.custom;
    if (custom !== undefined) {
      if (hasFieldConfig) {
        body.push(`export const panel${p.id}_custom: Loosen<${alias}.FieldConfig> = ${JSON.stringify(custom, null, 2)};`);
      } else {
        fail(`${dash.uid}: panel ${p.id} "${p.title}": ${p.type} panels have no custom field config`);
      }
    }
  }
  return lines.join('\n') + '\n' + body.join('\n') + '\n';
}

const files = [];
const summary = { schema: '', dashboards: [], panels: 0, typescript: ts.version };
summary.schema = JSON.parse(readFileSync(join(here, 'node_modules/@grafana/schema/package.json'), 'utf8')).version;
const dashboards = readdirSync(dashDir).filter((f) => f.endsWith('.json')).sort();
if (dashboards.length === 0) fail(`no dashboards in ${dashDir}`);
let first;
for (const name of dashboards) {
  const dash = JSON.parse(readFileSync(join(dashDir, name), 'utf8'));
  first ??= dash;
  const file = join(genDir, name.replace(/\.json$/, '.ts'));
  writeFileSync(file, tsSource(dash));
  files.push(file);
  const n = (dash.panels ?? []).filter((p) => p.type !== 'row').length;
  summary.dashboards.push({ file: name, uid: dash.uid, title: dash.title, schemaVersion: dash.schemaVersion, panels: n });
  summary.panels += n;
}

// 3. Planted mistakes, each of which must be reported.
const mutants = {
  unknown_dashboard_key: (d) => ({ ...d, refreshInterval: '5s' }),
  bad_graph_tooltip: (d) => ({ ...d, graphTooltip: 7 }),
  schema_version_string: (d) => ({ ...d, schemaVersion: '39' }),
  bad_variable_type: (d) => ({ ...d, templating: { list: [{ ...d.templating.list[0], type: 'qurey' }] } }),
  misspelt_panel_key: (d) => ({ ...d, panels: [{ ...firstPanel(d), gridpos: { h: 1, w: 1, x: 0, y: 0 } }] }),
  bad_legend_mode: (d) => ({
    ...d,
    panels: [withOptions(firstPanel(d, 'timeseries'), { legend: { ...firstPanel(d, 'timeseries').options.legend, displayMode: 'tabel' } })],
  }),
  missing_required_option: (d) => {
    const p = firstPanel(d, 'timeseries');
    const { tooltip, ...rest } = p.options;
    return { ...d, panels: [{ ...p, options: rest }] };
  },
  bad_draw_style: (d) => {
    const p = firstPanel(d, 'timeseries');
    const fc = structuredClone(p.fieldConfig);
    fc.defaults.custom.drawStyle = 'lines';
    return { ...d, panels: [{ ...p, fieldConfig: fc }] };
  },
};
function firstPanel(d, type) {
  const p = d.panels.find((p) => p.type !== 'row' && (!type || p.type === type));
  if (!p) throw new Error(`self-test needs a ${type ?? 'non-row'} panel in ${d.uid}`);
  return p;
}
function withOptions(p, over) {
  return { ...p, options: { ...p.options, ...over } };
}
const mutantFiles = {};
for (const [name, mutate] of Object.entries(mutants)) {
  const file = join(genDir, `mutant_${name}.ts`);
  writeFileSync(file, tsSource(mutate(structuredClone(first))));
  mutantFiles[file] = name;
}

// 4. Compile.
const program = ts.createProgram([...files, ...Object.keys(mutantFiles)], {
  noEmit: true,
  strict: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  skipLibCheck: true,
  types: [],
});
const diags = ts.getPreEmitDiagnostics(program);
const caught = new Set();
for (const d of diags) {
  const text = ts.flattenDiagnosticMessageText(d.messageText, '\n');
  const file = d.file ? resolve(d.file.fileName) : '';
  if (mutantFiles[file]) {
    caught.add(mutantFiles[file]);
    continue;
  }
  let where = file;
  if (d.file && d.start !== undefined) {
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    where = `${file}:${line + 1}`;
  }
  fail(`${where}: ${text}`);
}
summary.self_test = { planted: Object.keys(mutants).length, caught: caught.size };
for (const name of Object.keys(mutants)) {
  if (!caught.has(name)) fail(`self-test: the planted mistake "${name}" was not caught`);
}

if (!process.env.TLSRUM_KEEP_GENERATED) rmSync(genDir, { recursive: true, force: true });
else summary.generated = genDir;
summary.errors = errors;
process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
process.exit(errors.length ? 1 : 0);
