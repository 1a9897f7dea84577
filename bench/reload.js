#!/usr/bin/env node
// Issue 18's figure: consecutive reloads (SIGHUP) under steady load, with an app
// that takes START_DELAY_MS to listen and whose readiness check passes
// READY_AFTER_MS after that (test/fixtures/slow-ready.mjs), deployed as releases
// behind a `current` symlink that is flipped every few reloads. Goal: no failed
// request, no 503, /readyz 200 at every probe, every reload finished.
//
//   npm run build                             # at the repo root: the CLI and the test kit
//   node bench/reload.js                      # 50 reloads, 2 workers: 5-8 minutes
//   node bench/reload.js --reloads 5 --flip-every 2
//   cd bench && npm run reload -- --reloads 5
//   node bench/reload.js --help
//
// The load: paced clients, half on kept-alive connections (one http.Agent), half
// with a new connection per request (`Connection: close`), every request bounded
// by a timeout; and a /readyz probe every 100 ms on a new connection, as a
// kubelet sends it. Progress goes to stderr; the summary, then one JSON line, to
// stdout. Exit code 0 when the goal is met, 1 when not, 2 on bad arguments.
//
// Release correctness is measured honestly: a request in flight while a reload
// ends may come from the old release, so only requests that started after the
// reload finished AND its old workers exited (their `worker exited` lines), and
// before the next reload's first new worker can listen, are checked against the
// release `current` pointed at when SIGHUP was sent.
import {cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {setTimeout as delay} from 'node:timers/promises';
import {fileURLToPath} from 'node:url';
import {parseArgs} from 'node:util';
import {parseTimedLine} from './lib/proc.js';
import {percentile} from './lib/stats.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const FIXTURE = path.join(ROOT, 'test/fixtures/slow-ready.mjs');
const SCRIPT = path.basename(FIXTURE);

const USAGE = `usage: node bench/reload.js [options]

  --reloads N          consecutive reloads (default 50; env RELOADS)
  --workers N          -w of the cluster (default 2)
  --flip-every N       flip the release symlink before every Nth reload (default 10; 0 = never)
  --rate N             requests per second in all, half keep-alive, half new connections (default 400)
  --clients N          clients of each kind (default 4)
  --start-delay MS     the app's START_DELAY_MS (default 2000)
  --ready-after MS     the app's READY_AFTER_MS (default 1000)
  --listen-timeout D   the CLI's --listen-timeout (default 30s)
  --settle N           requests to complete after each reload's old workers exit, before the next SIGHUP (default 100)
  --timeout MS         each request's and probe's timeout (default 5000; probes at most 1000)
  --dist DIR           the build to run (default <repo>/dist; env BENCH_DIST)
  --verbose            one line per reload with its own counts (stderr)`;

const {values} = parseArgs({
	options: {
		reloads: {type: 'string', default: process.env.RELOADS ?? '50'},
		workers: {type: 'string', short: 'w', default: '2'},
		'flip-every': {type: 'string', default: '10'},
		rate: {type: 'string', default: '400'},
		clients: {type: 'string', default: '4'},
		'start-delay': {type: 'string', default: '2000'},
		'ready-after': {type: 'string', default: '1000'},
		'listen-timeout': {type: 'string', default: '30s'},
		settle: {type: 'string', default: '100'},
		timeout: {type: 'string', default: '5000'},
		dist: {type: 'string', default: process.env.BENCH_DIST},
		verbose: {type: 'boolean', default: false},
		help: {type: 'boolean', short: 'h', default: false},
	},
});
if (values.help) {
	console.log(USAGE);
	process.exit(0);
}

function whole(name, min) {
	const value = Number(values[name]);
	if (!Number.isInteger(value) || value < min) {
		console.error(`--${name}: "${values[name]}" is not a whole number of at least ${min}.\n\n${USAGE}`);
		process.exit(2);
	}

	return value;
}

const config = {
	reloads: whole('reloads', 1),
	workers: whole('workers', 1),
	flipEvery: whole('flip-every', 0),
	rate: whole('rate', 1),
	clients: whole('clients', 1),
	startDelayMs: whole('start-delay', 0),
	readyAfterMs: whole('ready-after', 0),
	listenTimeout: values['listen-timeout'],
	settle: whole('settle', 1),
	timeoutMs: whole('timeout', 1),
};
const dist = path.resolve(values.dist ?? path.join(ROOT, 'dist'));
const cli = path.join(dist, 'src/cli.js');
// The process and port helpers the tests use, from the repository's own build.
const testkit = path.join(ROOT, 'dist/testkit');
for (const file of [cli, path.join(testkit, 'proc.js')]) {
	if (!existsSync(file)) {
		console.error(`bench/reload.js needs ${file}: run \`npm run build\` in ${ROOT} first.`);
		process.exit(2);
	}
}

const {cleanEnv, spawnGroup} = await import(path.join(testkit, 'proc.js'));
const {freePort} = await import(path.join(testkit, 'net.js'));

const progress = text => process.stderr.write(`bench: ${text}\n`);

// ---------------------------------------------------------------------------
// The deploy directory

/**
 * <tmp>/releases/{r0,r1}/{slow-ready.mjs, release.txt}, <tmp>/current -> releases/r0,
 * and <tmp>/node_modules/graceful-cluster: a package whose `./worker` is the
 * build under test, for the app's `import 'graceful-cluster/worker'`.
 */
function deploy() {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-bench-reload-'));
	for (const name of ['r0', 'r1']) {
		const release = path.join(dir, 'releases', name);
		mkdirSync(release, {recursive: true});
		cpSync(FIXTURE, path.join(release, SCRIPT));
		writeFileSync(path.join(release, 'release.txt'), `${name}\n`);
	}

	const pkg = path.join(dir, 'node_modules/graceful-cluster');
	mkdirSync(pkg, {recursive: true});
	writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({name: 'graceful-cluster', type: 'module', exports: {'./worker': './dist/src/worker/index.js'}}));
	// Node follows the link to the build, whose own imports (p-event) resolve from the repository.
	symlinkSync(dist, path.join(pkg, 'dist'));
	const current = path.join(dir, 'current');
	let release;
	return {
		dir,
		/** Through the link: each new worker resolves it when it starts. */
		script: path.join(current, SCRIPT),
		get release() {
			return release;
		},
		/** Points `current` at `name` atomically: a new link renamed over the old one, as deploy tools do. */
		flip(name) {
			const next = `${current}.next`;
			symlinkSync(path.join('releases', name), next);
			renameSync(next, current);
			release = name;
		},
	};
}

// ---------------------------------------------------------------------------
// The load

/** One GET bounded by `timeoutMs`; never rejects: a failure comes back as an error code. */
function get(port, urlPath, agent, timeoutMs) {
	return new Promise(resolve => {
		const request = http.get({host: '127.0.0.1', port, path: urlPath, agent, headers: agent === false ? {connection: 'close'} : {}}, response => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', chunk => {
				body += chunk;
			});
			response.on('end', () => resolve({status: response.statusCode, body}));
			response.on('error', error => resolve({error: error.code ?? error.message}));
			// After 'end' this changes nothing; before it, the body was cut.
			response.on('close', () => resolve({error: 'ABORTED'}));
		});
		request.setTimeout(timeoutMs, () => {
			request.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), {code: 'TIMEOUT'}));
		});
		request.on('error', error => resolve({error: error.code ?? error.message}));
	});
}

/**
 * `clients` keep-alive clients and as many with a new connection per request,
 * each paced to its share of `rate`, plus the /readyz probe every 100 ms. Every
 * outcome is kept with the time its request started and ended.
 */
function startLoad(port, {rate, clients, timeoutMs}) {
	const agent = new http.Agent({keepAlive: true, maxSockets: clients});
	const intervalMs = (1000 * 2 * clients) / rate;
	const requests = [];
	const probes = [];
	const waiters = new Set();
	let stopped = false;
	const loop = async kind => {
		while (!stopped) {
			const startedAt = performance.now();
			const outcome = await get(port, '/', kind === 'keep-alive' ? agent : false, timeoutMs);
			const endedAt = performance.now();
			let answer;
			if (outcome.status === 200) {
				try {
					answer = JSON.parse(outcome.body);
				} catch {}
			}

			requests.push({kind, startedAt, endedAt, status: outcome.status, error: outcome.error, body: outcome.status === 200 ? undefined : outcome.body, pid: answer?.pid, release: answer?.release});
			for (const waiter of waiters) {
				waiter();
			}

			// Pacing, not a wait for an event: one request per interval and client.
			await delay(Math.max(0, startedAt + intervalMs - performance.now()));
		}
	};

	const loops = [
		...Array.from({length: clients}, () => loop('keep-alive')),
		...Array.from({length: clients}, () => loop('new connection')),
	];
	const inFlightProbes = new Set();
	const probeTimeoutMs = Math.min(1000, timeoutMs);
	const prober = setInterval(() => {
		const startedAt = performance.now();
		const probe = get(port, '/readyz', false, probeTimeoutMs).then(outcome => {
			probes.push({startedAt, status: outcome.status, error: outcome.error, body: outcome.status === 200 ? undefined : outcome.body});
			inFlightProbes.delete(probe);
		});
		inFlightProbes.add(probe);
	}, 100);
	const startedAt = performance.now();
	return {
		requests,
		probes,
		startedAt,
		/** Resolves once `n` requests that started after `since` have completed (rejects after `timeoutMs`). */
		async completedSince(since, n, timeout = 60_000) {
			let seen = 0;
			for (let i = requests.length - 1; i >= 0 && requests[i].endedAt > since; i--) {
				seen += requests[i].startedAt > since ? 1 : 0;
			}

			if (seen >= n) {
				return;
			}

			await new Promise((resolve, reject) => {
				const timer = setTimeout(() => {
					waiters.delete(check);
					reject(new Error(`the load did not complete ${n} requests within ${timeout} ms (${seen} so far)`));
				}, timeout);
				const check = () => {
					if (requests.at(-1).startedAt > since && ++seen >= n) {
						clearTimeout(timer);
						waiters.delete(check);
						resolve();
					}
				};

				waiters.add(check);
			});
		},
		async stop() {
			stopped = true;
			clearInterval(prober);
			await Promise.all([...loops, ...inFlightProbes]);
			agent.destroy();
			this.stoppedAt = performance.now();
		},
	};
}

/** A request's or probe's failure, as a label; undefined for a 200. */
function failureKind(sample) {
	if (sample.error !== undefined) {
		return `error ${sample.error}`;
	}

	if (sample.status === 200) {
		return undefined;
	}

	return sample.status === 500 && sample.body === 'not ready' ? '500 not ready' : String(sample.status);
}

function countBy(items, key) {
	const counts = {};
	for (const item of items) {
		const k = key(item);
		if (k !== undefined) {
			counts[k] = (counts[k] ?? 0) + 1;
		}
	}

	return counts;
}

// ---------------------------------------------------------------------------
// The run

const isReloadEnd = line => line.msg === 'reload finished' || String(line.msg).startsWith('reload failed');
const isRetiredExit = line => line.msg === 'worker exited' && line.workerRole === 'retiring';
const other = release => (release === 'r0' ? 'r1' : 'r0');

const target = deploy();
target.flip('r0');
const port = await freePort();
let cluster;
let load;
const cleanUp = () => {
	cluster?.stop();
	rmSync(target.dir, {recursive: true, force: true});
};

for (const signal of ['SIGINT', 'SIGTERM']) {
	process.on(signal, () => {
		cleanUp();
		progress(`${signal}: the cluster is stopped and ${target.dir} removed`);
		process.exit(130);
	});
}

/**
 * The primary's own CPU time (user + system, /proc; undefined elsewhere): what
 * refusing connections during the warm-ups costs it shows here, as the primary
 * offers a refused connection to another worker.
 */
function cpuSeconds(pid) {
	try {
		const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
		// utime and stime, fields 14 and 15 of the whole line, in clock ticks (100 per second on Linux).
		return (Number(fields[11]) + Number(fields[12])) / 100;
	} catch {
		return undefined;
	}
}

const primaryCpu = {start: undefined, end: undefined};
const reloads = [];
let exit;
let runError;
try {
	const args = [cli, '--workers', String(config.workers), '--listen-timeout', config.listenTimeout, '--reject-period', '500ms', '--log-format', 'json', target.script];
	progress(`node ${args.map(arg => (arg === cli ? path.relative(process.cwd(), cli) : arg)).join(' ')} (cwd ${target.dir}, port ${port})`);
	cluster = spawnGroup(process.execPath, args, {
		name: 'graceful-cluster',
		cwd: target.dir,
		env: cleanEnv({PORT: String(port), START_DELAY_MS: String(config.startDelayMs), READY_AFTER_MS: String(config.readyAfterMs)}),
		stderr: 'inherit',
		parse: parseTimedLine,
	});
	const startTimeout = config.startDelayMs + config.readyAfterMs + 30_000;
	await cluster.waitFor(line => line.msg === 'fixture warm', {count: config.workers, timeout: startTimeout, what: 'every worker warm'});
	progress(`${config.workers} workers listening and warm; load ${config.rate} req/s (${config.clients} keep-alive + ${config.clients} new-connection clients), /readyz every 100 ms`);
	load = startLoad(port, config);
	primaryCpu.start = cpuSeconds(cluster.pid);
	await load.completedSince(load.startedAt, config.settle);

	// Each reload replaces the workers one at a time: each must start, listen and (with the gate) be ready.
	const reloadTimeout = config.workers * (config.startDelayMs + config.readyAfterMs + 30_000) + 30_000;
	let retired = 0;
	for (let i = 1; i <= config.reloads; i++) {
		const flipped = config.flipEvery > 0 && i % config.flipEvery === 0;
		if (flipped) {
			target.flip(other(target.release));
		}

		const reload = {i, release: target.release, flipped, hupAt: performance.now()};
		reloads.push(reload);
		cluster.signal('SIGHUP');
		const end = await cluster.waitFor(isReloadEnd, {count: i, timeout: reloadTimeout, what: `the end of reload ${i}`});
		reload.outcome = end.msg === 'reload finished' ? 'finished' : 'failed';
		reload.msg = end.msg;
		reload.durationMs = end.durationMs;
		reload.wallMs = end.at - reload.hupAt;
		reload.endedAt = end.at;
		retired += Number(end.replaced ?? 0);
		if (retired > 0) {
			await cluster.waitFor(isRetiredExit, {count: retired, timeout: reloadTimeout, what: `the exit of reload ${i}'s old workers`});
		}

		reload.settledAt = performance.now();
		// Requests that start from now on can only reach this reload's workers.
		await load.completedSince(reload.settledAt, config.settle);
		const so = countBy(load.requests, failureKind);
		const failed = Object.values(so).reduce((a, b) => a + b, 0);
		const probeFailures = load.probes.filter(probe => failureKind(probe) !== undefined).length;
		progress(`reload ${i}/${config.reloads}${flipped ? ` (current -> ${reload.release})` : ''}: ${reload.outcome}${reload.durationMs === undefined ? '' : ` in ${reload.durationMs} ms`} (SIGHUP to log line ${Math.round(reload.wallMs)} ms; old workers gone ${Math.round(reload.settledAt - reload.endedAt)} ms later); so far ${load.requests.length} requests, ${failed} failed, ${probeFailures}/${load.probes.length} readyz failed`);
	}
} catch (error) {
	runError = error;
	progress(`the run stopped: ${error.message}`);
} finally {
	if (cluster) {
		primaryCpu.end = cpuSeconds(cluster.pid);
	}

	await load?.stop();
	if (cluster) {
		// The primary drains and exits on SIGTERM; the group is killed after, whatever is left in it.
		cluster.signal('SIGTERM');
		exit = await cluster.exitWithin(60_000);
	}

	cleanUp();
}

// ---------------------------------------------------------------------------
// The summary

const requests = load?.requests ?? [];
const probes = load?.probes ?? [];
const seconds = load ? (load.stoppedAt - load.startedAt) / 1000 : 0;
const failures = countBy(requests, failureKind);
const failed = Object.values(failures).reduce((a, b) => a + b, 0);
const probeFailures = countBy(probes, failureKind);
const probesFailed = Object.values(probeFailures).reduce((a, b) => a + b, 0);

// Each reload's window: from its old workers' exit until START_DELAY_MS after
// the next SIGHUP (the next reload's first new worker is forked after that
// signal and the app waits START_DELAY_MS before it listens: until then only
// this reload's workers can answer), or the end of the load.
let checked = 0;
let wrong = 0;
const wrongReleases = {};
for (const [index, reload] of reloads.entries()) {
	if (reload.settledAt === undefined) {
		continue;
	}

	const next = reloads[index + 1];
	const until = next ? next.hupAt + config.startDelayMs : load.stoppedAt;
	for (const request of requests) {
		if (request.status === 200 && request.startedAt > reload.settledAt && request.startedAt < until) {
			checked++;
			if (request.release !== reload.release) {
				wrong++;
				wrongReleases[`${request.release} for ${reload.release}`] = (wrongReleases[`${request.release} for ${reload.release}`] ?? 0) + 1;
			}
		}
	}
}

/** The reload a sample belongs to: the last SIGHUP sent before it started (0: before the first). */
const reloadOf = sample => reloads.findLast(reload => reload.hupAt <= sample.startedAt)?.i ?? 0;
const reloadsWithFailedRequest = new Set(requests.filter(r => failureKind(r) !== undefined).map(r => reloadOf(r)));
const reloadsWithFailedProbe = new Set(probes.filter(p => failureKind(p) !== undefined).map(p => reloadOf(p)));

const finished = reloads.filter(reload => reload.outcome === 'finished').length;
const durations = reloads.map(reload => reload.durationMs).filter(ms => typeof ms === 'number').sort((a, b) => a - b);
const latencies = requests.filter(r => r.status === 200).map(r => r.endedAt - r.startedAt).sort((a, b) => a - b);
const stat = list => ({median: percentile(list, 50), p90: percentile(list, 90), max: list.at(-1) ?? Number.NaN});
const duration = stat(durations);
const ms = value => (Number.isFinite(value) ? `${Math.round(value)} ms` : 'n/a');
const status503 = requests.filter(r => r.status === 503).length;
const notReady = failures['500 not ready'] ?? 0;
const goal = {
	noFailedRequest: failed === 0,
	no503: status503 === 0,
	readyzAlways200: probesFailed === 0 && probes.length > 0,
	everyReloadFinished: finished === config.reloads,
};
const pass = Object.values(goal).every(Boolean) && runError === undefined;
const list = counts => (Object.keys(counts).length === 0 ? 'none' : Object.entries(counts).map(([k, n]) => `${k}: ${n}`).join(', '));

console.log([
	`Reload bench (issue 18), ${new Date().toISOString().slice(0, 19)}Z: Node ${process.version}, ${os.availableParallelism()} CPUs, load average ${os.loadavg().map(n => n.toFixed(1)).join(' ')}`,
	`  cluster: -w ${config.workers}, --listen-timeout ${config.listenTimeout}; app: start ${config.startDelayMs} ms, ready ${config.readyAfterMs} ms after listen; release flipped every ${config.flipEvery || 'never'} reloads`,
	`reloads: ${finished}/${config.reloads} finished, ${reloads.filter(r => r.outcome === 'failed').length} failed${runError ? `, run stopped: ${runError.message.split('\n')[0]}` : ''}`,
	`  duration (durationMs of 'reload finished'): median ${ms(duration.median)}, p90 ${ms(duration.p90)}, max ${ms(duration.max)}`,
	`  SIGHUP to its log line: median ${ms(stat(reloads.map(r => r.wallMs).filter(Number.isFinite).sort((a, b) => a - b)).median)}`,
	`requests: ${requests.length} in ${seconds.toFixed(1)} s (${(requests.length / Math.max(seconds, 0.001)).toFixed(0)} req/s; ${requests.filter(r => r.kind === 'keep-alive').length} keep-alive, ${requests.filter(r => r.kind === 'new connection').length} new connection); 200 latency p50 ${percentile(latencies, 50)?.toFixed(1)} ms, p99 ${percentile(latencies, 99)?.toFixed(1)} ms`,
	`  failed: ${failed} (${list(failures)})`,
	`  503: ${status503}; 500 "not ready" (reached a worker whose readiness check had not passed): ${notReady}`,
	`  reloads with a failed request: ${reloadsWithFailedRequest.size}/${reloads.length}`,
	`readyz probes: ${probes.length}, failed ${probesFailed} (${list(probeFailures)}); reloads with a failed probe: ${reloadsWithFailedProbe.size}/${reloads.length}`,
	`release correctness: ${checked - wrong}/${checked} requests started after a reload's old workers exited (and before the next reload's new workers could listen) came from that reload's release${wrong > 0 ? ` (wrong: ${list(wrongReleases)})` : ''}`,
	`primary CPU: ${primaryCpu.start === undefined || primaryCpu.end === undefined ? 'n/a' : `${(primaryCpu.end - primaryCpu.start).toFixed(2)} s over ${seconds.toFixed(1)} s of load (${((primaryCpu.end - primaryCpu.start) / Math.max(seconds, 0.001) * 100).toFixed(1)} % of a core)`}`,
	`primary exit: ${exit ? `code ${exit.code}${exit.signal ? `, signal ${exit.signal}` : ''}` : 'did not exit within 60 s (killed)'}`,
	`goal (0 failed, 0 503, /readyz 200 at every probe, every reload finished): ${pass ? 'PASS' : `FAIL (${Object.entries(goal).filter(([, ok]) => !ok).map(([name]) => name).join(', ') || 'the run stopped'})`}`,
].join('\n'));

if (values.verbose) {
	for (const reload of reloads) {
		const mine = sample => reloadOf(sample) === reload.i;
		console.error(`  reload ${reload.i}: ${reload.outcome ?? 'unfinished'} ${reload.durationMs ?? ''} ms, release ${reload.release}; requests ${list(countBy(requests.filter(r => mine(r)), r => failureKind(r) ?? '200'))}; readyz ${list(countBy(probes.filter(p => mine(p)), p => failureKind(p) ?? '200'))}`);
	}
}

console.log(JSON.stringify({
	bench: 'reload',
	config,
	node: process.version,
	reloads: {requested: config.reloads, finished, failed: reloads.filter(r => r.outcome === 'failed').length, durationMs: {median: duration.median, p90: duration.p90, max: duration.max}, each: reloads.map(r => ({i: r.i, release: r.release, outcome: r.outcome ?? null, durationMs: r.durationMs ?? null}))},
	requests: {total: requests.length, perSecond: Math.round(requests.length / Math.max(seconds, 0.001)), failed, byKind: failures, status503, notReady},
	readyz: {probes: probes.length, failed: probesFailed, byKind: probeFailures},
	release: {checked, wrong},
	primaryCpuSeconds: primaryCpu.start === undefined || primaryCpu.end === undefined ? null : Math.round((primaryCpu.end - primaryCpu.start) * 100) / 100,
	exit: exit ? {code: exit.code, signal: exit.signal} : null,
	error: runError ? runError.message.split('\n')[0] : null,
	pass,
}));
process.exitCode = pass ? 0 : 1;
