#!/usr/bin/env node
// The rollout comparison (issue 4): the same rolling update through HAProxy as
// test/rollout/rollout.test.ts, with graceful-cluster and the alternatives a user
// would pick instead. Prints one markdown table on stdout, progress on stderr.
//
//   npm run build                       # in the repo root: the harness and the CLI are compiled there
//   cd bench && npm run rollout -- --rounds 3
//
// Options: --rounds N (default 3), --variants a,b (default all), --scenarios 1,3
// (default: 1, 2, 3 for graceful-cluster; 1 and 3 for the others, which have no
// serve-period knob: their configuration 2 would be configuration 1 again).
import {existsSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {parseArgs} from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const harnessFile = path.join(root, 'dist/testkit/rollout.js');
const cli = path.join(root, 'dist/src/cli.js');
if (!existsSync(harnessFile) || !existsSync(cli)) {
	console.error(`bench/rollout.js needs the compiled harness and CLI (${path.relative(root, harnessFile)}, ${path.relative(root, cli)}): run \`npm run build\` in ${root} first.`);
	process.exit(2);
}

const {Cleanup, describe, haproxyBinary, runRollout, SCENARIOS, HEALTH_CHECK} = await import(harnessFile);

const {values} = parseArgs({
	options: {
		rounds: {type: 'string', default: '3'},
		variants: {type: 'string'},
		scenarios: {type: 'string'},
		verbose: {type: 'boolean', default: false},
	},
});
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1) {
	console.error(`--rounds: "${values.rounds}" is not a whole number above 0.`);
	process.exit(2);
}

try {
	haproxyBinary();
} catch (error) {
	console.error(error.message);
	process.exit(2);
}

// The same drain timings as the test: detection by HAProxy takes 1-2 s.
const SERVE_PERIOD = '4s';
const REJECT_PERIOD = '4s';
const GRACE_PERIOD = '15s';
const variantsDir = path.join(here, 'rollout/variants');
const script = name => path.join(variantsDir, name);
const node = process.execPath;
const env = ({port}, extra = {}) => ({PORT: String(port), ...extra});

const VARIANTS = [
	{
		name: 'graceful-cluster',
		servePeriod: true,
		pod: context => ({
			argv: [node, cli, '--workers', '2', '--serve-period', context.scenario.serve ? SERVE_PERIOD : '0s', '--reject-period', REJECT_PERIOD, '--grace-period', GRACE_PERIOD, script('graceful-cluster.mjs')],
			env: env(context),
		}),
	},
	{name: 'node:http, no signal handling', pod: context => ({argv: [node, script('plain.mjs')], env: env(context)})},
	{name: 'server.close() on SIGTERM', pod: context => ({argv: [node, script('server-close.mjs')], env: env(context)})},
	{name: '@godaddy/terminus (defaults)', pod: context => ({argv: [node, script('terminus.mjs')], env: env(context)})},
	{name: '@godaddy/terminus + 5 s beforeShutdown', pod: context => ({argv: [node, script('terminus.mjs')], env: env(context, {TERMINUS_DELAY: '1'})})},
	{name: 'http-terminator', pod: context => ({argv: [node, script('http-terminator.mjs')], env: env(context)})},
	{
		name: 'lightship (probe on its own port)',
		separateCheckPort: true,
		checkPath: '/ready',
		pod: context => ({argv: [node, script('lightship.mjs')], env: env(context, {CHECK_PORT: String(context.checkPort)})}),
	},
	{
		name: 'pm2-runtime, cluster mode (-i 2)',
		pod: context => ({
			argv: [node, path.join(here, 'node_modules/pm2/bin/pm2-runtime'), 'start', script('pm2-app.cjs'), '-i', '2'],
			env: env(context, {PM2_HOME: context.home}),
		}),
	},
	{name: 'node:cluster primary + worker.disconnect()', pod: context => ({argv: [node, script('cluster-disconnect.mjs')], env: env(context)})},
];

const wanted = values.variants?.split(',').map(s => s.trim().toLowerCase());
const variants = VARIANTS.filter(v => !wanted || wanted.some(w => v.name.toLowerCase().startsWith(w)));
const scenarioIds = values.scenarios?.split(',').map(Number);

// Kill whatever a run left if we are interrupted.
let current;
for (const signal of ['SIGINT', 'SIGTERM']) {
	process.on(signal, async () => {
		await current?.run();
		process.exit(130);
	});
}

const rows = [];
const startedAt = new Date();
for (const variant of variants) {
	const scenarios = SCENARIOS.filter(s => (scenarioIds ? scenarioIds.includes(s.id) : (variant.servePeriod || !s.serve)));
	for (const scenario of scenarios) {
		const results = [];
		for (let round = 1; round <= rounds; round++) {
			current = new Cleanup();
			try {
				const result = await runRollout({
					variant,
					scenario,
					exitTimeoutMs: 25_000,
					log: message => values.verbose && console.error(message),
				}, current);
				results.push(result);
				console.error(`[${round}/${rounds}] ${describe(result)}`);
			} catch (error) {
				console.error(`[${round}/${rounds}] ${variant.name}, config ${scenario.id}: the run failed: ${error.stack}`);
			} finally {
				await current.run();
			}
		}

		rows.push({variant, scenario, results});
	}
}

// ---------------------------------------------------------------------------
// The table

const sum = (results, pick) => results.reduce((total, r) => total + pick(r), 0);
const seconds = ms => (ms / 1000).toFixed(1);
const range = list => {
	if (list.length === 0) {
		return 'n/a';
	}

	const min = Math.min(...list);
	const max = Math.max(...list);
	return min === max ? seconds(min) : `${seconds(min)}–${seconds(max)}`;
};

const KIND_NAMES = {
	reset: 'reset',
	refused: 'refused',
	timeout: 'timeout',
	'empty-reply': 'empty reply',
	truncated: 'truncated body',
	502: '502',
	504: '504',
	'503-no-retry-after': '503 w/o Retry-After',
	'other-status': 'other status',
	'bad-body': 'wrong body',
	'other-error': 'other error',
};

function ambiguousCell(results) {
	const kinds = {};
	for (const result of results) {
		for (const [kind, n] of Object.entries(result.ambiguous)) {
			kinds[kind] = (kinds[kind] ?? 0) + n;
		}
	}

	const total = Object.values(kinds).reduce((a, b) => a + b, 0);
	if (total === 0) {
		return '**0**';
	}

	return `${total} (${Object.entries(kinds).sort((a, b) => b[1] - a[1]).map(([kind, n]) => `${KIND_NAMES[kind] ?? kind} ${n}`).join(', ')})`;
}

function exitCell(results) {
	const codes = [...new Set(results.map(r => (r.exit.killed ? 'killed' : r.exit.signal ? r.exit.signal : `code ${r.exit.code}`)))];
	return `${range(results.map(r => r.exit.afterMs))} (${codes.join(', ')})`;
}

const lines = [
	'| variant | LB config | runs | requests | 2xx | 503 + Retry-After | ambiguous failures | in-flight completed | detection (s) | time to exit (s) |',
	'| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |',
];
for (const {variant, scenario, results} of rows) {
	if (results.length === 0) {
		lines.push(`| ${variant.name} | ${scenario.id} | 0 | the runs failed | | | | | | |`);
		continue;
	}

	const inflightSent = sum(results, r => r.inflight.sent);
	const inflightDone = sum(results, r => r.inflight.completed);
	const rerun = sum(results, r => r.inflight.rerun ?? 0);
	lines.push([
		'',
		variant.name,
		scenario.id,
		results.length,
		sum(results, r => r.requests),
		sum(results, r => r.ok),
		sum(results, r => r.rejected),
		ambiguousCell(results),
		`${inflightDone}/${inflightSent}${rerun > 0 ? ` (${rerun} re-run on another pod)` : ''}`,
		range(results.map(r => r.detectionMs).filter(ms => ms !== undefined)),
		exitCell(results),
		'',
	].join(' | ').trim());
}

const configs = SCENARIOS.map(s => `${s.id} = ${s.name}`).join('; ');
console.log([
	`Rollout comparison, ${startedAt.toISOString().slice(0, 10)}: ${os.availableParallelism()} CPUs (nproc), Node ${process.version}, ${os.type()} ${os.release()}, ${rounds} round(s) per row.`,
	`LB configs: ${configs}. HAProxy health checks on the readiness path every ${HEALTH_CHECK.interMs} ms, fall ${HEALTH_CHECK.fall}, rise ${HEALTH_CHECK.rise}. Config 1 and 2 use \`retries 0\`; config 3 \`retries 3\`, \`option redispatch 1\`, \`retry-on conn-failure empty-response 503\`.`,
	'',
	...lines,
].join('\n'));
