#!/usr/bin/env node
// Terminations behind several load balancers with their own propagation delays
// (issue 19, item 3): two graceful-cluster pods, K simulated load balancers
// (one per node) that stop routing to the terminating pod at delays drawn from a
// seeded distribution, keep-alive clients, a kubelet-like health checker. The
// harness is testkit/lb-delays.ts (shared with test/rollout/lb-delays.test.ts).
// Per distribution it prints the requests refused or reset after the reject
// phase ended (must be 0), the 503s, the reject duration against the configured
// period, and the pod's last-arrival figure against the harness's ground truth;
// then one JSON line and, at the end, a markdown table for docs/benchmarks.md.
//
//   npm run build                                 # in the repo root
//   node bench/lb-delays.js --dist all --terminations 50 --adaptive on --reject-period 20s
//   node bench/lb-delays.js --dist straggler --terminations 3 --adaptive off --reject-period 3s
//
// Options: --dist small|medium|straggler|all (default all), --terminations N
// (default 50), --adaptive on|off (default on: needs a CLI with --adaptive-reject),
// --reject-period D (default 20s; with --adaptive off every termination lasts
// that long), --lbs K (default 4), --seed N (default 1), --clients-per-lb N
// (default 3), --think-ms N (default 25), --warmup D (default 3s), --verbose.
// Exits 1 when any request was refused or reset.
import {existsSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {parseArgs} from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const kit = path.join(root, 'dist/testkit/lb-delays.js');
const rolloutKit = path.join(root, 'dist/testkit/rollout.js');
const cli = path.join(root, 'dist/src/cli.js');
const app = path.join(root, 'test/fixtures/app.mjs');
if (!existsSync(kit) || !existsSync(cli)) {
	console.error(`bench/lb-delays.js needs the compiled harness and CLI (${path.relative(root, kit)}, ${path.relative(root, cli)}): run \`npm run build\` in ${root} first.`);
	process.exit(2);
}

const {DISTRIBUTIONS, describeTermination, gracefulClusterPod, runLbDelays, summarize, supportsAdaptiveReject} = await import(kit);
const {Cleanup} = await import(rolloutKit);

function usage(message) {
	console.error(`bench/lb-delays.js: ${message}`);
	process.exit(2);
}

/** "500ms", "3s", "2m" or a bare number of seconds, in ms. */
function duration(name, text) {
	const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
	if (!match) {
		usage(`${name}: "${text}" is not a duration (500ms, 3s, 2m, or seconds)`);
	}

	const unit = {ms: 1, s: 1000, m: 60_000}[match[2] ?? 's'];
	return Math.round(Number(match[1]) * unit);
}

function whole(name, text, min) {
	const value = Number(text);
	if (!Number.isInteger(value) || value < min) {
		usage(`${name}: "${text}" is not a whole number of at least ${min}`);
	}

	return value;
}

const {values} = parseArgs({
	options: {
		dist: {type: 'string', default: 'all'},
		terminations: {type: 'string', default: '50'},
		adaptive: {type: 'string', default: 'on'},
		'reject-period': {type: 'string', default: '20s'},
		lbs: {type: 'string', default: '4'},
		seed: {type: 'string', default: '1'},
		'clients-per-lb': {type: 'string', default: '3'},
		'think-ms': {type: 'string', default: '25'},
		warmup: {type: 'string', default: '3s'},
		verbose: {type: 'boolean', default: false},
	},
});

const names = values.dist === 'all' ? Object.keys(DISTRIBUTIONS) : values.dist.split(',').map(s => s.trim());
for (const name of names) {
	if (!DISTRIBUTIONS[name]) {
		usage(`--dist: "${name}" is not one of ${Object.keys(DISTRIBUTIONS).join(', ')}, all`);
	}
}

if (values.adaptive !== 'on' && values.adaptive !== 'off') {
	usage(`--adaptive: "${values.adaptive}" is not on or off`);
}

const adaptive = values.adaptive === 'on';
if (adaptive && !supportsAdaptiveReject(cli)) {
	usage(`--adaptive on: ${path.relative(root, cli)} has no --adaptive-reject yet (its --help does not mention it); run with --adaptive off`);
}

const terminations = whole('--terminations', values.terminations, 1);
const rejectPeriodMs = duration('--reject-period', values['reject-period']);
const lbs = whole('--lbs', values.lbs, 1);
const seed = whole('--seed', values.seed, 0);
const clientsPerLb = whole('--clients-per-lb', values['clients-per-lb'], 1);
const thinkMs = whole('--think-ms', values['think-ms'], 0);
const warmupMs = duration('--warmup', values.warmup);

let current;
for (const signal of ['SIGINT', 'SIGTERM']) {
	process.on(signal, async () => {
		await current?.run();
		process.exit(130);
	});
}

const s = ms => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : 'n/a');
const startedAt = new Date();
const summaries = [];
for (const name of names) {
	const distribution = DISTRIBUTIONS[name];
	console.error(`${name}: ${distribution.description}; ${lbs} load balancers, ${terminations} terminations, --reject-period ${s(rejectPeriodMs)}, adaptive ${values.adaptive}`);
	current = new Cleanup();
	try {
		const run = await runLbDelays({
			pod: gracefulClusterPod({cli, app, cwd: root, rejectPeriodMs, adaptive}),
			distribution,
			rejectPeriodMs,
			terminations,
			lbs,
			seed,
			clientsPerLb,
			thinkMs,
			warmupMs,
			log: message => values.verbose && console.error(message),
			onTermination: t => console.error(`  ${describeTermination(t)}`),
		}, current);
		const summary = summarize(run);
		summaries.push(summary);
		report(summary);
	} catch (error) {
		console.error(`${name}: the run failed: ${error.stack}`);
		process.exitCode = 2;
	} finally {
		await current.run();
	}
}

function report(x) {
	const rps = x.clients.requests / (x.durationMs / 1000);
	console.log([
		`${x.distribution} (${x.description}), ${x.lbs} load balancers, seed ${x.seed}, --reject-period ${s(x.rejectPeriodMs)}, adaptive ${values.adaptive}:`,
		`  terminations                            ${x.terminations}`,
		`  refused/reset after the reject end      ${x.lateAfterRejectEnd}${x.lateAfterRejectEnd === 0 ? '' : '   <-- must be 0'} (all refused/reset: ${x.late}, in ${x.terminationsWithLate} terminations)`,
		`  503 + Retry-After from pod 1            ${x.rejected} (retried on pod 2 by the load balancers)`,
		`  reject duration                         median ${s(x.rejectMs.median)}, p90 ${s(x.rejectMs.p90)}, max ${s(x.rejectMs.max)} vs the fixed ${s(x.rejectPeriodMs)}; ended by ${JSON.stringify(x.rejectEnds)}; seen by the harness: median ${s(x.rejectObservedMedianMs)}`,
		`  last app arrival (pod's lastArrivalMs)  median ${s(x.lastArrivalMedianMs)}; ground truth median ${s(x.truthLastArrivalMedianMs)}; |pod - truth| median ${Number.isFinite(x.lastArrivalErrorMs.median) ? `${x.lastArrivalErrorMs.median} ms` : 'n/a'}, max ${Number.isFinite(x.lastArrivalErrorMs.max) ? `${x.lastArrivalErrorMs.max} ms` : 'n/a'}`,
		`  max LB delay                            median ${s(x.maxDelayMs.median)}, max ${s(x.maxDelayMs.max)}`,
		`  exit after the reject end               median ${s(x.exitAfterRejectMedianMs)}; exit codes ${JSON.stringify(x.exitCodes)}`,
		`  clients                                 ${x.clients.requests} requests (${Math.round(rps)} req/s over the run), ${x.clients.ok} ok, failures ${JSON.stringify(x.clients.failures)}`,
		`JSON ${JSON.stringify({bench: 'lb-delays', adaptive: values.adaptive, ...x})}`,
	].join('\n'));
	if (x.late > 0) {
		process.exitCode ||= 1;
	}
}

if (summaries.length > 0) {
	const cell = ms => (Number.isFinite(ms) ? (ms / 1000).toFixed(2) : 'n/a');
	console.log([
		'',
		`lb-delays, ${startedAt.toISOString().slice(0, 10)}: \`node bench/lb-delays.js --dist ${values.dist} --terminations ${terminations} --adaptive ${values.adaptive} --reject-period ${values['reject-period']} --lbs ${lbs} --seed ${seed} --clients-per-lb ${clientsPerLb} --think-ms ${thinkMs} --warmup ${values.warmup}\`, ${os.availableParallelism()} cores, Node ${process.version}.`,
		'',
		'| distribution | terminations | refused/reset after the reject end | 503s | reject (s): median / p90 / max | vs fixed (s) | pod lastArrivalMs median (s) | truth median (s) | max LB delay median / max (s) |',
		'| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |',
		...summaries.map(x => `| ${x.distribution} | ${x.terminations} | ${x.lateAfterRejectEnd === 0 ? '**0**' : `**${x.lateAfterRejectEnd}**`}${x.late === x.lateAfterRejectEnd ? '' : ` (${x.late} in all)`} | ${x.rejected} | ${cell(x.rejectMs.median)} / ${cell(x.rejectMs.p90)} / ${cell(x.rejectMs.max)} | ${cell(x.rejectPeriodMs)} | ${cell(x.lastArrivalMedianMs)} | ${cell(x.truthLastArrivalMedianMs)} | ${cell(x.maxDelayMs.median)} / ${cell(x.maxDelayMs.max)} |`),
	].join('\n'));
}
