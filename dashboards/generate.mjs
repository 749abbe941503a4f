#!/usr/bin/env node
// Writes the Grafana dashboards in this folder from one description, so that
// selectors, variables and panel options stay consistent (kubernetes-mixin
// does the same with jsonnet). Run `node dashboards/generate.mjs` after an
// edit; `--check` fails if a committed JSON file differs from what this
// script makes (the dashboard test runs it that way).
//
// Every query filters on $instance; on $server_name and $transport where the
// metric has that label (agent/src/metrics/mod.rs). The test in
// agent/tests/dashboards.rs runs every query against a real Prometheus.
//
// The heaviest panels (quantiles over every bucket series, ratios by server
// name and role) read the per-agent recording rules of
// deploy/prometheus/rules/recording.rules.yml (`instance_server_name:…`,
// 5-minute rates), which deploy/prometheus/prometheus.yml loads: load them
// wherever these dashboards' data source evaluates rules. Those panels
// show no data without them (a fallback `or` to the raw expression would
// evaluate the raw expression every time, which is the cost the rules
// save).

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const DS = { type: 'prometheus', uid: '${datasource}' };

// ---- selectors ----

// Which filter labels each metric carries (see agent/src/metrics/mod.rs).
const LABELS = {
  tls_handshakes_total: ['server_name', 'transport'],
  tls_resumption_offers_total: ['server_name', 'transport'],
  tls_early_data_total: ['server_name', 'transport'],
  tls_hello_retry_requests_total: ['transport', 'server_name'],
  tls_handshake_duration_seconds: ['server_name', 'transport'],
  tls_time_to_first_byte_seconds: ['server_name', 'transport'],
  tls_handshake_round_trips: ['server_name', 'transport'],
  tls_tcp_rtt_seconds: ['transport', 'server_name'],
  tls_avoidable_handshake_seconds_total: ['transport', 'server_name'],
  tls_client_hello_delay_seconds: ['server_name', 'transport'],
  tls_server_think_seconds: ['server_name', 'transport'],
  tls_client_think_seconds: ['server_name', 'transport'],
  tls_handshake_network_seconds: ['server_name', 'transport'],
  // Issue 15: by client fingerprint, no server_name (the series budget).
  tls_client_handshakes_total: ['transport'],
  tls_client_handshake_duration_seconds: ['transport'],
  // Issue 16: proxies and pools (lifetime: no server_name, the budget).
  tls_idle_before_use_seconds: ['server_name', 'transport'],
  tls_connections_first_use_total: ['server_name'],
  tls_connection_lifetime_seconds: ['transport'],
  // Recording rules (deploy/prometheus/rules/recording.rules.yml).
  'instance_server_name:tls_handshakes:rate5m': ['server_name', 'transport'],
  'instance_server_name:tls_handshake_duration_seconds_bucket:rate5m': ['server_name', 'transport'],
};

/** `metric{instance=~"$instance", <variable filters>, <extra>}` */
function m(metric, extra = '', suffix = '') {
  const filters = ['instance=~"$instance"'];
  for (const l of LABELS[metric] ?? []) filters.push(`${l}=~"$${l}"`);
  if (extra) filters.push(extra);
  return `${metric}${suffix}{${filters.join(', ')}}`;
}

const RI = '$__rate_interval';
const rate = (metric, extra = '', suffix = '') => `rate(${m(metric, extra, suffix)}[${RI}])`;
const inc = (metric, extra = '', suffix = '') => `increase(${m(metric, extra, suffix)}[$__range])`;

// Recorded 5-minute rates per agent: selected and summed like raw series.
const HANDSHAKES_5M = 'instance_server_name:tls_handshakes:rate5m';
const DURATION_BUCKETS_5M = 'instance_server_name:tls_handshake_duration_seconds_bucket:rate5m';
const RECORDED = ' A 5-minute rate from the recording rules (deploy/prometheus/rules).';

// ---- panel builders ----

function target(expr, legendFormat, extra = {}) {
  return { datasource: DS, editorMode: 'code', expr, legendFormat, range: true, ...extra };
}
const instant = (expr, legendFormat, extra = {}) =>
  target(expr, legendFormat, { range: false, instant: true, format: 'time_series', ...extra });

function withRefIds(targets) {
  return targets.map((t, i) => ({ ...t, refId: String.fromCharCode(65 + i) }));
}

const thresholdsBase = { mode: 'absolute', steps: [{ color: 'green', value: null }] };

function timeseries(title, description, targets, { unit = 'short', min = 0, max, stack = false, overrides = [], draw = 'line' } = {}) {
  const defaults = {
    color: { mode: 'palette-classic' },
    custom: {
      axisBorderShow: false,
      axisCenteredZero: false,
      axisColorMode: 'text',
      axisLabel: '',
      axisPlacement: 'auto',
      barAlignment: 0,
      drawStyle: draw,
      fillOpacity: stack ? 30 : 10,
      gradientMode: 'none',
      hideFrom: { legend: false, tooltip: false, viz: false },
      insertNulls: false,
      lineInterpolation: 'linear',
      lineWidth: 1,
      pointSize: 4,
      scaleDistribution: { type: 'linear' },
      showPoints: 'auto',
      spanNulls: false,
      stacking: { group: 'A', mode: stack ? 'normal' : 'none' },
      thresholdsStyle: { mode: 'off' },
    },
    mappings: [],
    min,
    thresholds: thresholdsBase,
    unit,
  };
  if (max !== undefined) defaults.max = max;
  return {
    type: 'timeseries',
    title,
    description,
    datasource: DS,
    fieldConfig: { defaults, overrides },
    options: {
      legend: { calcs: ['mean', 'lastNotNull'], displayMode: 'table', placement: 'bottom', showLegend: true },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
    targets: withRefIds(targets),
  };
}

function stat(title, description, targets, { unit = 'short', decimals, min, max, thresholds = thresholdsBase, graph = 'area' } = {}) {
  const defaults = { color: { mode: 'thresholds' }, mappings: [], thresholds, unit };
  if (decimals !== undefined) defaults.decimals = decimals;
  if (min !== undefined) defaults.min = min;
  if (max !== undefined) defaults.max = max;
  return {
    type: 'stat',
    title,
    description,
    datasource: DS,
    fieldConfig: { defaults, overrides: [] },
    options: {
      colorMode: 'value',
      graphMode: graph,
      justifyMode: 'auto',
      orientation: 'auto',
      percentChangeColorMode: 'standard',
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      showPercentChange: false,
      textMode: 'auto',
      wideLayout: true,
    },
    targets: withRefIds(targets),
  };
}

function bargauge(title, description, targets, { unit = 'short', min = 0, color = 'continuous-BlYlRd' } = {}) {
  return {
    type: 'bargauge',
    title,
    description,
    datasource: DS,
    fieldConfig: {
      defaults: { color: { mode: color }, mappings: [], min, thresholds: thresholdsBase, unit },
      overrides: [],
    },
    options: {
      displayMode: 'gradient',
      legend: { calcs: [], displayMode: 'list', placement: 'bottom', showLegend: false },
      maxVizHeight: 300,
      minVizHeight: 16,
      minVizWidth: 8,
      namePlacement: 'auto',
      orientation: 'horizontal',
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      showUnfilled: true,
      sizing: 'auto',
      valueMode: 'color',
    },
    targets: withRefIds(targets),
  };
}

function piechart(title, description, targets) {
  return {
    type: 'piechart',
    title,
    description,
    datasource: DS,
    fieldConfig: {
      defaults: { color: { mode: 'palette-classic' }, custom: { hideFrom: { legend: false, tooltip: false, viz: false } }, mappings: [], unit: 'short' },
      overrides: [],
    },
    options: {
      displayLabels: ['name', 'percent'],
      orientation: 'auto',
      legend: { calcs: [], displayMode: 'table', placement: 'right', showLegend: true, values: ['value', 'percent'] },
      pieType: 'donut',
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      sort: 'desc',
      tooltip: { mode: 'single', sort: 'none' },
    },
    targets: withRefIds(targets),
  };
}

function heatmap(title, description, targets, { unit = 's' } = {}) {
  return {
    type: 'heatmap',
    title,
    description,
    datasource: DS,
    fieldConfig: {
      defaults: { custom: { hideFrom: { legend: false, tooltip: false, viz: false }, scaleDistribution: { type: 'linear' } } },
      overrides: [],
    },
    options: {
      calculate: false,
      cellGap: 1,
      color: { exponent: 0.5, fill: 'dark-orange', mode: 'scheme', reverse: false, scale: 'exponential', scheme: 'Oranges', steps: 64 },
      exemplars: { color: 'rgba(255,0,255,0.7)' },
      filterValues: { le: 1e-9 },
      legend: { show: true },
      rowsFrame: { layout: 'auto' },
      showValue: 'never',
      tooltip: { mode: 'single', showColorScale: false, yHistogram: true },
      yAxis: { axisPlacement: 'left', reverse: false, unit },
    },
    targets: withRefIds(targets),
  };
}

const row = (title) => ({ type: 'row', title, collapsed: false, panels: [] });

// Colour the outcomes the same way everywhere.
const outcomeColours = (pairs) =>
  pairs.map(([regex, color]) => ({
    matcher: { id: 'byRegexp', options: regex },
    properties: [{ id: 'color', value: { fixedColor: color, mode: 'fixed' } }],
  }));

// ---- layout ----

/** Places panels on Grafana's 24-column grid: each entry is [panel, width, height]; rows take a full line. */
function layout(items) {
  const panels = [];
  let x = 0;
  let y = 0;
  let lineHeight = 0;
  let id = 1;
  for (const [panel, w = 24, h = 8] of items) {
    if (panel.type === 'row') {
      if (x > 0) {
        y += lineHeight;
        x = 0;
        lineHeight = 0;
      }
      panels.push({ ...panel, id: id++, gridPos: { h: 1, w: 24, x: 0, y } });
      y += 1;
      continue;
    }
    if (x + w > 24) {
      y += lineHeight;
      x = 0;
      lineHeight = 0;
    }
    panels.push({ ...panel, id: id++, gridPos: { h, w, x, y } });
    x += w;
    lineHeight = Math.max(lineHeight, h);
  }
  return panels;
}

// ---- variables ----

function queryVariable(name, label, query, description) {
  return {
    name,
    label,
    description,
    type: 'query',
    datasource: DS,
    query: { qryType: 1, query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
    refresh: 2,
    regex: '',
    sort: 1,
    multi: true,
    includeAll: true,
    allValue: '.*',
    current: { selected: true, text: ['All'], value: ['$__all'] },
    options: [],
    hide: 0,
    skipUrlSync: false,
  };
}

const templating = {
  list: [
    {
      name: 'datasource',
      label: 'Data source',
      type: 'datasource',
      query: 'prometheus',
      regex: '',
      // The data source deploy/grafana provisions; Grafana falls back to the
      // first Prometheus data source where it does not exist.
      current: { selected: false, text: 'Prometheus (tlsrum)', value: 'tlsrum-prometheus' },
      options: [],
      hide: 0,
      refresh: 1,
      skipUrlSync: false,
      includeAll: false,
      multi: false,
    },
    queryVariable('instance', 'Agent', 'label_values(tlsrum_packets_total, instance)', 'tlsrum agents (Prometheus instance label)'),
    queryVariable(
      'server_name',
      'Server name',
      'label_values(tls_handshakes_total{instance=~"$instance"}, server_name)',
      'SNI as the agent labels it: the top N names, the rest "other", "none" without SNI (hashed if the agent runs with --hash-server-names)',
    ),
    queryVariable('transport', 'Transport', 'label_values(tls_handshakes_total{instance=~"$instance"}, transport)', 'tcp or quic'),
  ],
};

function dashboard({ uid, title, description, panels, otherTitle }) {
  return {
    annotations: {
      list: [
        {
          builtIn: 1,
          datasource: { type: 'grafana', uid: '-- Grafana --' },
          enable: true,
          hide: true,
          iconColor: 'rgba(0, 211, 255, 1)',
          name: 'Annotations & Alerts',
          type: 'dashboard',
        },
      ],
    },
    description,
    editable: true,
    fiscalYearStartMonth: 0,
    graphTooltip: 1,
    id: null,
    links: [
      {
        asDropdown: false,
        icon: 'dashboard',
        includeVars: true,
        keepTime: true,
        tags: ['tlsrum'],
        targetBlank: false,
        title: otherTitle,
        tooltip: '',
        type: 'dashboards',
        url: '',
      },
    ],
    panels: layout(panels),
    refresh: '30s',
    schemaVersion: 39,
    tags: ['tlsrum', 'tls'],
    templating,
    time: { from: 'now-6h', to: 'now' },
    timepicker: {},
    timezone: 'browser',
    title,
    uid,
    version: 1,
    weekStart: '',
  };
}

// ---- the resumption dashboard ----

const ratioOf = (num, den) => `(${num}\nor\n0 * ${den})\n/\n${den}`;

/** Resumed / (full + resumed) handshakes of `metric`, by `by`. */
const resumptionRate = (by, metric = 'tls_handshakes_total') =>
  ratioOf(
    `sum by (${by}) (` + rate(metric, 'kind="resumed"') + ')',
    `sum by (${by}) (` + rate(metric, 'kind=~"full|resumed"') + ')',
  );
/** The same from the recorded rates (by server_name, role, transport, instance). */
const recordedResumptionRate = (by) =>
  ratioOf(
    `sum by (${by}) (${m(HANDSHAKES_5M, 'kind="resumed"')})`,
    `sum by (${by}) (${m(HANDSHAKES_5M, 'kind=~"full|resumed"')})`,
  );
const acceptedByMethod = 'sum by (method) (' + rate('tls_resumption_offers_total', 'outcome="accepted"') + ')';
const offersByMethod = 'sum by (method) (' + rate('tls_resumption_offers_total') + ')';

const health = [
  [row('Agent health')],
  [
    timeseries(
      'Packets, kernel events and records',
      'Per agent: packets (libpcap) or kernel events (eBPF) analysed, events read from the eBPF ring buffer (zero on the libpcap backend), and connection records produced.',
      [
        target(`sum by (instance) (rate(tlsrum_packets_total{instance=~"$instance"}[${RI}]))`, 'packets {{instance}}'),
        target(`sum by (instance) (rate(tlsrum_ringbuf_events_total{instance=~"$instance"}[${RI}]))`, 'ring-buffer events {{instance}}'),
        target(`sum by (instance) (rate(tlsrum_connection_records_total{instance=~"$instance"}[${RI}]))`, 'records {{instance}}'),
      ],
      { unit: 'ops' },
    ),
    12,
  ],
  [
    timeseries(
      'Drops by reason',
      'Data that never reached the analyzer, by reason: kernel side (ring buffer full, payload cut, byte budget, header errors, fragments, load and flow-map errors) and user side (reassembly gap, record limit). Anything above zero means some handshakes are missing or incomplete. Kernel bookkeeping (tlsrum_kernel_packets_total) and lost bytes (tlsrum_kernel_lost_bytes_total) are separate metrics.',
      [
        target(
          `sum by (instance, reason) (rate(tlsrum_drops_total{instance=~"$instance"}[${RI}]))`,
          '{{reason}} {{instance}}',
        ),
      ],
      { unit: 'ops' },
    ),
    12,
  ],
  [
    timeseries(
      'Agent CPU',
      'CPU the tlsrum process uses, in cores (1 = one core busy all the time): its user and system time. The eBPF programs\' own time is not in it: the kernel runs them in the softirqs of the packets they see.',
      [target(`sum by (instance) (rate(process_cpu_seconds_total{instance=~"$instance"}[${RI}]))`, 'cores {{instance}}')],
    ),
    12,
  ],
  [
    timeseries(
      'Agent memory',
      'Resident memory of the tlsrum process; the analyzer\'s flow state, part of it and bounded by --max-memory; and the kernel buffer between the capture and the agent (--buffer-size: the eBPF ring buffer, or libpcap\'s on each interface), which a container\'s memory limit counts too. Drops in bursts while the agent has CPU to spare call for a larger buffer.',
      [
        target(`sum by (instance) (process_resident_memory_bytes{instance=~"$instance"})`, 'resident {{instance}}'),
        target(`sum by (instance) (tlsrum_flow_memory_bytes{instance=~"$instance"})`, 'flow state {{instance}}'),
        target(`sum by (instance) (tlsrum_capture_buffer_bytes{instance=~"$instance"})`, 'capture buffer {{instance}}'),
      ],
      { unit: 'bytes' },
    ),
    12,
  ],
  [
    timeseries('Flows tracked', 'Flows in the agent\'s flow table now.', [
      target(`sum by (instance) (tlsrum_flows_active{instance=~"$instance"})`, 'active {{instance}}'),
    ]),
    8,
  ],
  [
    timeseries(
      'Flows evicted and expired',
      'Evicted: pushed out of the full flow table (--max-flows, 200,000) before the handshake was over; those connections are reported as incomplete. Over --max-memory: TCP flows and QUIC connections finished early, least recently used first, to keep the flow state within the memory budget (256 MiB by default): a flood. Expired: finished by the idle timeout (--idle-timeout).',
      [
        target(`sum by (instance) (rate(tlsrum_flows_evicted_total{instance=~"$instance"}[${RI}]))`, 'evicted {{instance}}'),
        target(`sum by (instance) (rate(tlsrum_analyzer_memory_evictions_total{instance=~"$instance"}[${RI}]))`, 'over --max-memory {{instance}}'),
        target(`sum by (instance) (rate(tlsrum_flows_expired_total{instance=~"$instance"}[${RI}]))`, 'expired {{instance}}'),
      ],
      { unit: 'ops' },
    ),
    8,
  ],
  [
    timeseries(
      'Parse errors by reason',
      'Malformed packets, TCP stream errors and TLS handshake messages that did not parse.',
      [target(`sum by (instance, reason) (rate(tlsrum_parse_errors_total{instance=~"$instance"}[${RI}]))`, '{{reason}} {{instance}}')],
      { unit: 'ops' },
    ),
    8,
  ],
];

const resumption = dashboard({
  uid: 'tlsrum-resumption',
  title: 'tlsrum / Resumption and 0-RTT',
  otherTitle: 'tlsrum',
  description:
    'Passive TLS handshake monitoring: how many real handshakes are resumed, how many resumption offers servers decline, how 0-RTT fares, and the agents\' own health.',
  panels: [
    [row('Overview')],
    [
      stat(
        'Resumption rate',
        'Resumed handshakes / (full + resumed) over the selected range. Failed and incomplete handshakes are left out.',
        [
          instant(
            `sum(${inc('tls_handshakes_total', 'kind="resumed"')})\n/\nsum(${inc('tls_handshakes_total', 'kind=~"full|resumed"')})`,
            'resumed',
          ),
        ],
        { unit: 'percentunit', decimals: 1, min: 0, max: 1, graph: 'none' },
      ),
      6,
      5,
    ],
    [
      stat('Handshakes', 'TLS handshakes per second, every kind.', [target(`sum(${rate('tls_handshakes_total')})`, 'handshakes/s')], {
        unit: 'reqps',
      }),
      6,
      5,
    ],
    [
      stat(
        'Offers accepted',
        'Accepted resumption offers / all offers that got a verdict, over the selected range.',
        [
          instant(
            `sum(${inc('tls_resumption_offers_total', 'outcome="accepted"')})\n/\nsum(${inc('tls_resumption_offers_total')})`,
            'accepted',
          ),
        ],
        { unit: 'percentunit', decimals: 1, min: 0, max: 1, graph: 'none' },
      ),
      6,
      5,
    ],
    [
      stat('0-RTT offers', '0-RTT (early data) offers over the selected range, every outcome.', [
        instant(`sum(${inc('tls_early_data_total')})`, '0-RTT'),
      ], { decimals: 0, graph: 'none' }),
      6,
      5,
    ],
    [row('Resumption')],
    [
      timeseries(
        'Resumption rate by server name',
        'Resumed / (full + resumed) handshakes per server name. A name with handshakes but no resumption shows 0.' + RECORDED,
        [target(recordedResumptionRate('server_name'), '{{server_name}}')],
        { unit: 'percentunit', max: 1 },
      ),
      12,
    ],
    [
      timeseries(
        'Resumption offers: accepted vs declined',
        'Offers by method and the server\'s verdict. A TLS 1.2 client often offers a session ID and a ticket in one hello, so offers can outnumber handshakes. Offers from failed or incomplete handshakes get no verdict.',
        [target(`sum by (outcome, method) (${rate('tls_resumption_offers_total')})`, '{{outcome}} {{method}}')],
        { unit: 'ops', stack: true, overrides: outcomeColours([['accepted.*', 'green'], ['declined.*', 'red']]) },
      ),
      12,
    ],
    [
      timeseries(
        'Offer acceptance by method',
        'Accepted / all offers, per method (session_id, ticket, psk): which of the session cache, tickets and TLS 1.3 PSKs work.',
        [target(ratioOf(acceptedByMethod, offersByMethod), '{{method}}')],
        { unit: 'percentunit', max: 1 },
      ),
      8,
    ],
    [
      timeseries(
        'Handshakes by kind and method',
        'full, resumed (by method), failed (alert, reset or close first), incomplete (capture ended or flow evicted).',
        [target(`sum by (kind, method) (${rate('tls_handshakes_total')})`, '{{kind}} {{method}}')],
        { unit: 'ops', stack: true },
      ),
      8,
    ],
    [
      bargauge(
        'Top server names by declined offers',
        'Resumption offers the server declined (a full handshake followed), over the selected range: where a session cache or ticket key is not working.',
        [instant(`topk(10, sum by (server_name) (${inc('tls_resumption_offers_total', 'outcome="declined"')}))`, '{{server_name}}')],
        { color: 'continuous-YlRd' },
      ),
      8,
    ],
    [row('0-RTT (early data)')],
    [
      timeseries(
        '0-RTT by outcome',
        'Early data offers. accepted/rejected only where the wire shows it; "attempted" means the server accepted the PSK and the early-data verdict is encrypted.',
        [target(`sum by (outcome) (${rate('tls_early_data_total')})`, '{{outcome}}')],
        { unit: 'ops', stack: true, overrides: outcomeColours([['accepted', 'green'], ['attempted', 'yellow'], ['rejected', 'red']]) },
      ),
      12,
    ],
    [
      bargauge(
        '0-RTT by server name and outcome',
        'Early data offers over the selected range.',
        [instant(`sum by (server_name, outcome) (${inc('tls_early_data_total')})`, '{{server_name}} {{outcome}}')],
        { color: 'continuous-GrYlRd' },
      ),
      12,
    ],
    [row('Who connects')],
    [
      timeseries(
        'Resumption rate by address family',
        'Resumed / (full + resumed) handshakes, IPv4 against IPv6 (the connection as seen, after tunnels).',
        [target(resumptionRate('family'), '{{family}}')],
        { unit: 'percentunit', max: 1 },
      ),
      8,
    ],
    [
      timeseries(
        'Resumption rate by version',
        'Resumed / (full + resumed) handshakes by negotiated TLS version.',
        [target(resumptionRate('version'), '{{version}}')],
        { unit: 'percentunit', max: 1 },
      ),
      8,
    ],
    [
      timeseries(
        'Resumption rate by top client',
        'Resumed / (full + resumed) handshakes by client fingerprint (ja4_stable: JA4 without the session-dependent extensions, so a client\'s fresh and resuming hellos count together): the agent\'s top clients by volume (--top-clients, 20), the rest "other", "none" without a fingerprint; with --ja4-names the legend shows the client\'s name. A fingerprint counts under its own name from its admission on (docs/running.md). Not split by server name: the metric has no server_name label.',
        [target(resumptionRate('ja4_stable, client', 'tls_client_handshakes_total'), '{{client}} {{ja4_stable}}')],
        { unit: 'percentunit', max: 1 },
      ),
      8,
    ],
    [row('Versions and transports')],
    [
      piechart('TLS versions', 'Negotiated version over the selected range ("unknown": never negotiated).', [
        instant(`sum by (version) (${inc('tls_handshakes_total')})`, '{{version}}'),
      ]),
      6,
    ],
    [
      piechart('Transports', 'TLS over TCP versus QUIC over the selected range.', [
        instant(`sum by (transport) (${inc('tls_handshakes_total')})`, '{{transport}}'),
      ]),
      6,
    ],
    [
      timeseries('Handshakes by version and transport', 'Handshakes per second by negotiated version and transport.', [
        target(`sum by (version, transport) (${rate('tls_handshakes_total')})`, '{{version}} {{transport}}'),
      ], { unit: 'ops', stack: true }),
      12,
    ],
    ...health,
  ],
});

// ---- the handshake cost dashboard ----

const quantiles = (metric, by, qs = [0.5, 0.9, 0.99]) =>
  qs.map((q) =>
    target(`histogram_quantile(${q}, sum by (${by}, le) (${rate(metric, '', '_bucket')}))`, `p${Math.round(q * 100)} {{${by}}}`),
  );
/** Handshake duration quantiles from the recorded bucket rates. */
const recordedQuantiles = (by, qs) =>
  qs.map((q) =>
    target(`histogram_quantile(${q}, sum by (${by}, le) (${m(DURATION_BUCKETS_5M)}))`, `p${Math.round(q * 100)} {{${by}}}`),
  );
const mean = (metric, by) =>
  target(`sum by (${by}) (${rate(metric, '', '_sum')})\n/\nsum by (${by}) (${rate(metric, '', '_count')})`, `mean {{${by}}}`);

// Mean seconds per handshake of one part of the split, over the handshakes
// whose split is known: tls_handshake_network_seconds and
// tls_client_think_seconds hold exactly those (TLS over TCP with its
// three-way handshake in view), and so does tls_server_think_seconds on
// TCP; its QUIC series (no client think time there) stay out, or the three
// parts would not describe the same handshakes. Means, not quantiles: means
// add up, so the stack's height is the mean handshake time of those
// handshakes.
const splitMean = (metric, extra = '') =>
  `sum(${rate(metric, extra, '_sum')})\n/\nsum(${rate(metric, extra, '_count')})`;

// ---- proxies and pools (issue 16) ----

// A proxy's two sides: inbound (this host is the TLS server), outbound (it
// is the client, to origins), transit (neither). The pool hit rate is the
// share of outbound connections first used more than 10 ms after their
// handshake (ON_DEMAND_MS in agent/src/metrics/mod.rs): pooled or
// pre-warmed rather than opened on demand.
const pools = [
  [row('Proxies and pools')],
  [
    timeseries(
      'Handshakes by role',
      'Handshakes per second by role: inbound (this host is the TLS server), outbound (this host is the client: a proxy\'s handshakes with its origins), transit (neither: a tap or router). unknown: no role (replay without --local).',
      [target(`sum by (role) (${rate('tls_handshakes_total')})`, '{{role}}')],
      { unit: 'ops', stack: true },
    ),
    8,
  ],
  [
    timeseries(
      'Resumption rate by role',
      'Resumed / (full + resumed) handshakes by role: clients resuming with this host (inbound) against this host resuming with its origins (outbound).' + RECORDED,
      [target(recordedResumptionRate('role'), '{{role}}')],
      { unit: 'percentunit', max: 1 },
    ),
    8,
  ],
  [
    timeseries(
      'Handshake duration p95 by role',
      'ClientHello to the client\'s first application data, 95th percentile from the histogram buckets, by role: what clients wait for this host, what this host waits for its origins.' + RECORDED,
      recordedQuantiles('role', [0.95]),
      { unit: 's' },
    ),
    8,
  ],
  [
    timeseries(
      'Outbound handshakes per origin',
      'Handshakes per second this host made as the client, by origin (server_name): what a connection pool or pre-warming saves.',
      [target(`sum by (server_name) (${rate('tls_handshakes_total', 'role="outbound"')})`, '{{server_name}}')],
      { unit: 'ops', stack: true },
    ),
    12,
  ],
  [
    timeseries(
      'Pool hit rate by origin',
      'Share of outbound connections first used more than 10 ms after their handshake ended (pooled or pre-warmed) rather than within 10 ms (opened on demand), by origin, from the wire: tls_connections_first_use_total{use="pooled"} / all.',
      [
        target(
          ratioOf(
            `sum by (server_name) (${rate('tls_connections_first_use_total', 'role="outbound", use="pooled"')})`,
            `sum by (server_name) (${rate('tls_connections_first_use_total', 'role="outbound"')})`,
          ),
          '{{server_name}}',
        ),
      ],
      { unit: 'percentunit', max: 1 },
    ),
    12,
  ],
  [
    timeseries(
      'Idle before use p50 / p95 by role',
      'The handshake\'s end to the client\'s first application data: near zero for a connection opened on demand, long for a pooled or pre-warmed one. Quantiles from the histogram buckets (1 ms to 15 min).',
      quantiles('tls_idle_before_use_seconds', 'role', [0.5, 0.95]),
      { unit: 's' },
    ),
    12,
  ],
  [
    timeseries(
      'Connection lifetime p50 / p95 by role',
      'A connection\'s first packet to its FIN or RST, for the connections seen to end, by role: how long pooled connections live, to size pools. Not split by server name: the metric has no server_name label.',
      quantiles('tls_connection_lifetime_seconds', 'role', [0.5, 0.95]),
      { unit: 's' },
    ),
    12,
  ],
];

const cost = dashboard({
  uid: 'tlsrum-handshake-cost',
  title: 'tlsrum / Handshake cost',
  otherTitle: 'tlsrum',
  description:
    'What TLS handshakes cost real users: duration, time to first byte, where the time goes (network, server, client), ClientHello delay, round trips, TCP round-trip time and the time resumption would have saved.',
  panels: [
    [row('Handshake duration')],
    [
      heatmap(
        'Handshake duration',
        'ClientHello to the client\'s first application data (or Finished), every kind, from the agent\'s histogram buckets.',
        [target(`sum by (le) (${rate('tls_handshake_duration_seconds', '', '_bucket')})`, '{{le}}', { format: 'heatmap' })],
      ),
      24,
      9,
    ],
    [
      timeseries(
        'Handshake duration p50 / p90 / p99 by kind',
        'Quantiles estimated from the histogram buckets (0.5 ms to 5 s), and the exact mean.',
        [...quantiles('tls_handshake_duration_seconds', 'kind'), mean('tls_handshake_duration_seconds', 'kind')],
        { unit: 's' },
      ),
      12,
    ],
    [
      timeseries(
        'Time to first byte p50 / p90 / p99 by kind',
        'ClientHello to the server\'s first application data.',
        [...quantiles('tls_time_to_first_byte_seconds', 'kind'), mean('tls_time_to_first_byte_seconds', 'kind')],
        { unit: 's' },
      ),
      12,
    ],
    [
      timeseries(
        'Handshake duration p50 / p95 by server name',
        'ClientHello to the client\'s first application data per server name, every kind, from the histogram buckets: which names are slow for their clients.' + RECORDED,
        recordedQuantiles('server_name', [0.5, 0.95]),
        { unit: 's' },
      ),
      24,
    ],
    [row('Who connects')],
    [
      timeseries(
        'Handshake duration p95 by address family',
        'ClientHello to the client\'s first application data, 95th percentile from the histogram buckets, IPv4 against IPv6.',
        quantiles('tls_handshake_duration_seconds', 'family', [0.95]),
        { unit: 's' },
      ),
      8,
    ],
    [
      timeseries(
        'Handshake duration p95 by version',
        'ClientHello to the client\'s first application data, 95th percentile from the histogram buckets, by negotiated TLS version.',
        quantiles('tls_handshake_duration_seconds', 'version', [0.95]),
        { unit: 's' },
      ),
      8,
    ],
    [
      timeseries(
        'Handshake duration p95 by top client',
        'ClientHello to the client\'s first application data, 95th percentile, by client fingerprint (ja4_stable): the agent\'s top clients by volume (--top-clients, 20), the rest "other"; with --ja4-names the legend shows the client\'s name. Not split by server name: the metric has no server_name label.',
        [target(`histogram_quantile(0.95, sum by (ja4_stable, client, le) (${rate('tls_client_handshake_duration_seconds', '', '_bucket')}))`, 'p95 {{client}} {{ja4_stable}}')],
        { unit: 's' },
      ),
      8,
    ],
    [row('Where the time goes')],
    [
      timeseries(
        'Where the time goes',
        'Mean handshake time split into network (round trips x TCP RTT: the handshake time less both think times), the server\'s own processing and the client\'s own processing, stacked: the stack\'s height is the mean handshake time. Over TLS-over-TCP handshakes whose split is known (three-way handshake in view); QUIC shows no client think time and is left out.',
        [
          target(splitMean('tls_handshake_network_seconds'), 'network'),
          target(splitMean('tls_server_think_seconds', 'transport="tcp"'), 'server'),
          target(splitMean('tls_client_think_seconds'), 'client'),
        ],
        { unit: 's', stack: true, overrides: outcomeColours([['network', 'blue'], ['server', 'orange'], ['client', 'purple']]) },
      ),
      12,
    ],
    [
      timeseries(
        'ClientHello delay p50 / p95 by server name',
        'TCP handshake\'s end (the client\'s ACK) to its ClientHello: time the client spent before starting TLS (loading a CA store, resolving a proxy). TLS over TCP only. Quantiles from the histogram buckets (0.5 ms to 5 s).',
        quantiles('tls_client_hello_delay_seconds', 'server_name', [0.5, 0.95]),
        { unit: 's' },
      ),
      12,
    ],
    [row('Round trips')],
    [
      bargauge(
        'Round trips before the client could send data',
        'Handshakes by round trips over the selected range: TLS 1.2 full 2, TLS 1.2 resumed and TLS 1.3 1, accepted 0-RTT 0; HelloRetryRequest adds one. TCP\'s own handshake is not counted.',
        [instant(`sum by (le) (${inc('tls_handshake_round_trips', '', '_bucket')})`, '{{le}}', { format: 'heatmap' })],
        { color: 'continuous-GrYlRd' },
      ),
      8,
    ],
    [
      timeseries(
        'Mean round trips by kind',
        'Mean handshake round trips per kind.',
        [mean('tls_handshake_round_trips', 'kind')],
        { unit: 'short' },
      ),
      8,
    ],
    [
      timeseries(
        'HelloRetryRequest share',
        'Handshakes with a HelloRetryRequest (the client guessed the wrong key share: one more round trip) / all handshakes.',
        [
          target(
            `(sum by (transport) (${rate('tls_hello_retry_requests_total')})\n  or 0 * sum by (transport) (rate(tls_handshakes_total{instance=~"$instance", transport=~"$transport", server_name=~"$server_name"}[${RI}])))\n/\nsum by (transport) (rate(tls_handshakes_total{instance=~"$instance", transport=~"$transport", server_name=~"$server_name"}[${RI}]))`,
            '{{transport}}',
          ),
        ],
        { unit: 'percentunit', max: 1 },
      ),
      8,
    ],
    [row('Network and avoidable latency')],
    [
      timeseries(
        'TCP round-trip time',
        'From the TCP three-way handshake, as seen at the agent.',
        [...quantiles('tls_tcp_rtt_seconds', 'transport'), mean('tls_tcp_rtt_seconds', 'transport')],
        { unit: 's' },
      ),
      8,
    ],
    [
      timeseries(
        'Avoidable handshake time by server name',
        'Seconds per second that full handshakes cost beyond a resumed one, where the client had offered resumption (round trips saved x TCP RTT).',
        [target(`sum by (server_name) (${rate('tls_avoidable_handshake_seconds_total')})`, '{{server_name}}')],
        { unit: 's', stack: true },
      ),
      8,
    ],
    [
      bargauge(
        'Avoidable time by server name',
        'Total handshake time resumption would have saved over the selected range.',
        [instant(`topk(10, sum by (server_name) (${inc('tls_avoidable_handshake_seconds_total')}))`, '{{server_name}}')],
        { unit: 's', color: 'continuous-YlRd' },
      ),
      8,
    ],
    ...pools,
  ],
});

// ---- output ----

const files = {
  'tlsrum-resumption.json': resumption,
  'tlsrum-handshake-cost.json': cost,
};

const check = process.argv.includes('--check');
let stale = [];
for (const [name, dash] of Object.entries(files)) {
  const path = join(here, name);
  const text = JSON.stringify(dash, null, 2) + '\n';
  if (check) {
    let old = '';
    try {
      old = readFileSync(path, 'utf8');
    } catch {}
    if (old !== text) stale.push(name);
  } else {
    writeFileSync(path, text);
  }
}
if (stale.length) {
  console.error(`stale: ${stale.join(', ')} (run node dashboards/generate.mjs)`);
  process.exit(1);
}
