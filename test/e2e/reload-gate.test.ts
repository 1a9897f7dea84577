// Issue 18: a reload waits for each new worker's readiness checks, not only its
// listen, before the old worker of its slot retires. The short version of
// bench/reload.js: a slow app (test/fixtures/slow-ready.mjs) deployed as
// releases behind a `current` symlink, steady keep-alive and new-connection
// load, and a kubelet-like /readyz probe every 100 ms on a new connection.
import {cpSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync} from 'node:fs';
import {EventEmitter} from 'node:events';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import {setTimeout as delay} from 'node:timers/promises';
import test, {type ExecutionContext} from 'ava';
import {pEvent} from 'p-event';
import {freePort} from '../../testkit/net.js';
import {fixture, ROOT, start, type LogLine} from '../helpers/cluster.js';

const SCRIPT = 'slow-ready.mjs';

/**
 * A deploy directory: releases/<name>/{slow-ready.mjs, release.txt}, `current`
 * pointing at the first, and node_modules/graceful-cluster (this repository)
 * for the app's `import 'graceful-cluster/worker'`. Removed in teardown.
 */
function deploy(t: ExecutionContext, names: readonly string[], {neverReady = []}: {neverReady?: readonly string[]} = {}) {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-reload-gate-'));
	t.teardown(() => {
		rmSync(dir, {recursive: true, force: true});
	});
	for (const name of names) {
		const release = path.join(dir, 'releases', name);
		mkdirSync(release, {recursive: true});
		cpSync(fixture(SCRIPT), path.join(release, SCRIPT));
		writeFileSync(path.join(release, 'release.txt'), `${name}\n`);
		if (neverReady.includes(name)) {
			writeFileSync(path.join(release, 'never-ready'), 'a broken release\n');
		}
	}

	mkdirSync(path.join(dir, 'node_modules'));
	symlinkSync(ROOT, path.join(dir, 'node_modules/graceful-cluster'));
	const current = path.join(dir, 'current');
	/** Points `current` at a release the way a deploy tool does: a new link renamed over the old one (atomic). */
	const flip = (name: string): void => {
		const next = `${current}.next`;
		symlinkSync(path.join('releases', name), next);
		renameSync(next, current);
	};

	flip(names[0]!);
	// Through the link, so that each new worker resolves it when it starts.
	return {dir, script: path.join(current, SCRIPT), flip};
}

type Outcome = {readonly status: number; readonly body: string} | {readonly error: string};
type Sample = Outcome & {readonly kind: 'keep-alive' | 'new connection' | 'readyz'; readonly startedAt: number};

/** One GET, bounded by `timeoutMs`; never rejects: a failure is an `error` code. */
async function get(port: number, urlPath: string, agent: http.Agent | false, timeoutMs: number): Promise<Outcome> {
	return new Promise(resolve => {
		const request = http.get({host: '127.0.0.1', port, path: urlPath, agent, headers: agent === false ? {connection: 'close'} : {}}, response => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', (chunk: string) => {
				body += chunk;
			});
			response.on('end', () => {
				resolve({status: response.statusCode ?? 0, body});
			});
			response.on('error', (error: NodeJS.ErrnoException) => {
				resolve({error: error.code ?? error.message});
			});
			response.on('close', () => {
				resolve({error: 'ABORTED'});
			});
		});
		request.setTimeout(timeoutMs, () => {
			request.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), {code: 'TIMEOUT'}));
		});
		request.on('error', (error: NodeJS.ErrnoException) => {
			resolve({error: error.code ?? error.message});
		});
	});
}

/**
 * Paced clients in a loop (keep-alive ones on one agent, the others a new
 * connection per request) and a /readyz probe every 100 ms on a new connection;
 * every outcome recorded with the time its request started. Bounded in time.
 */
function traffic(port: number, {clients = 2, intervalMs = 10, maxMs = 30_000} = {}) {
	const agent = new http.Agent({keepAlive: true, maxSockets: clients});
	const requests: Sample[] = [];
	const probes: Sample[] = [];
	const progress = new EventEmitter();
	let stopped = false;
	const until = performance.now() + maxMs;
	const loop = async (kind: 'keep-alive' | 'new connection') => {
		while (!stopped && performance.now() < until) {
			const startedAt = performance.now();
			requests.push({kind, startedAt, ...await get(port, '/', kind === 'keep-alive' ? agent : false, 5000)});
			progress.emit('result');
			// Pacing, not a wait for anything: each client sends one request per interval.
			await delay(Math.max(0, startedAt + intervalMs - performance.now()));
		}
	};

	const loops = [
		...Array.from({length: clients}, async () => loop('keep-alive')),
		...Array.from({length: clients}, async () => loop('new connection')),
	];
	const pendingProbes = new Set<Promise<void>>();
	const prober = setInterval(() => {
		const startedAt = performance.now();
		const probe = get(port, '/readyz', false, 1000).then(outcome => {
			probes.push({kind: 'readyz', startedAt, ...outcome});
			pendingProbes.delete(probe);
		});
		pendingProbes.add(probe);
	}, 100);
	return {
		requests,
		probes,
		/** Resolves once `n` more requests have completed. */
		async more(n: number): Promise<void> {
			const at = requests.length + n;
			await pEvent(progress, 'result', {filter: () => requests.length >= at, timeout: 20_000});
		},
		async stop(): Promise<void> {
			stopped = true;
			clearInterval(prober);
			await Promise.all([...loops, ...pendingProbes]);
			agent.destroy();
		},
	};
}

const isReloadEnd = (line: LogLine): boolean => line.msg === 'reload finished' || String(line.msg).startsWith('reload failed');
const isRetiredExit = (line: LogLine): boolean => line.msg === 'worker exited' && line['workerRole'] === 'retiring';

/** Requests that did not get a 200, by what they got: a status or an error code. */
function failures(samples: readonly Sample[]): Record<string, number> {
	const counts: Record<string, number> = {};
	for (const sample of samples) {
		const key = 'error' in sample ? sample.error : sample.status === 200 ? undefined : `${sample.status}${sample.status === 500 ? ` ${sample.body}` : ''}`;
		if (key !== undefined) {
			counts[key] = (counts[key] ?? 0) + 1;
		}
	}

	return counts;
}

const answer = (sample: Sample): {pid: number; release: string} | undefined =>
	'status' in sample && sample.status === 200 ? JSON.parse(sample.body) as {pid: number; release: string} : undefined;

test('3 reloads of a slow-to-be-ready app under load: no failed request, /readyz 200 at every probe, the flipped release serves after its reload', async t => {
	const port = await freePort();
	const {dir, script, flip} = deploy(t, ['r0', 'r1']);
	const app = start(t, ['--workers', '2', '--listen-timeout', '30s', '--reject-period', '300ms', script], {
		cwd: dir,
		env: {PORT: String(port), START_DELAY_MS: '300', READY_AFTER_MS: '700'},
	});
	await app.waitForLog('fixture warm', {count: 2});
	const load = traffic(port);
	t.teardown(async () => load.stop());
	await load.more(100);

	app.kill('SIGHUP');
	await app.waitForLog(isReloadEnd, {count: 1});
	flip('r1');
	app.kill('SIGHUP');
	await app.waitForLog(isReloadEnd, {count: 2});
	// Both reloads' old workers gone: whatever starts now can only reach r1's.
	await app.waitForLog(isRetiredExit, {count: 4});
	const flippedAt = performance.now();
	await load.more(100);
	app.kill('SIGHUP');
	await app.waitForLog(isReloadEnd, {count: 3});
	await load.stop();
	app.kill('SIGTERM');
	const exit = await app.exited;

	const {requests, probes} = load;
	// The 200s only: anything else is what `failures` counts.
	const after = requests.filter(sample => sample.startedAt > flippedAt).flatMap(sample => answer(sample)?.release ?? []);
	t.log({requests: requests.length, failed: failures(requests), probes: probes.length, probesFailed: failures(probes), releasesAfterFlip: [...new Set(after)]});
	t.deepEqual(failures(requests), {}, 'every request got a 200: no error, no 503, no 500 "not ready"');
	t.is(requests.filter(sample => 'status' in sample && sample.status === 503).length, 0, 'no 503');
	t.falsy(app.lines.find(line => line.msg === 'fixture request before ready'), 'no request reached a worker before its readiness check passed');
	t.true(requests.some(sample => sample.kind === 'keep-alive') && requests.some(sample => sample.kind === 'new connection'));
	t.true(probes.length >= 30, `probed every 100 ms (${probes.length} probes)`);
	t.deepEqual(failures(probes), {}, '/readyz answered 200 at every probe');
	t.is(app.lines.filter(line => line.msg === 'reload finished').length, 3, 'every reload finished');
	t.true(after.length >= 100);
	t.deepEqual([...new Set(after)], ['r1'], 'after the second reload only the flipped release answers');
	t.is(exit.code, 0, app.text());
});

test('a new release whose readiness check never passes fails the reload; the old worker keeps serving and stays ready', async t => {
	const port = await freePort();
	const {dir, script, flip} = deploy(t, ['r0', 'r1'], {neverReady: ['r1']});
	// No start delay, and 5 s of --listen-timeout: on a busy CI machine Node's own
	// start took most of 2 s, and the first check's result had not come in when
	// the gate closed (the failure then had no check to name).
	const app = start(t, ['--workers', '1', '--listen-timeout', '5s', '--reject-period', '300ms', script], {
		cwd: dir,
		env: {PORT: String(port), START_DELAY_MS: '0', READY_AFTER_MS: '700'},
	});
	const oldPid = Number((await app.waitForLog('fixture warm'))['pid']);
	const load = traffic(port);
	t.teardown(async () => load.stop());
	await load.more(50);

	flip('r1');
	app.kill('SIGHUP');
	const end = await app.waitForLog(isReloadEnd);
	await load.more(100);
	await load.stop();
	app.kill('SIGTERM');
	const exit = await app.exited;

	const {requests, probes} = load;
	t.log({reload: end, requests: requests.length, failed: failures(requests), probes: probes.length, probesFailed: failures(probes)});
	t.true(String(end.msg).startsWith('reload failed'), `the reload failed (${String(end.msg)})`);
	t.regex(JSON.stringify(end), /warm/, 'the failure names the check that did not pass');
	t.deepEqual(failures(requests), {}, 'every request got a 200');
	t.deepEqual([...new Set(requests.flatMap(sample => answer(sample)?.pid ?? []))], [oldPid], 'only the old worker answered');
	t.true(probes.length >= 5, `probed every 100 ms (${probes.length} probes)`);
	t.deepEqual(failures(probes), {}, '/readyz answered 200 at every probe');
	t.is(exit.code, 0, app.text());
});
