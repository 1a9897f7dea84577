// Signals from every side: straight to a worker, to the whole process group, twice.
import test, {type ExecutionContext} from 'ava';
import {mkdtempSync, readFileSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {setTimeout as delay} from 'node:timers/promises';
import {url} from '../../testkit/net.js';
import {eventually, isAlive} from '../../testkit/proc.js';
import {CLI, fixture, start, startCluster} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

test('a worker signalled directly keeps serving and waits for the primary', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '10s'], fixture('app.mjs'));
	const pids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	process.kill(pids[0]!, 'SIGTERM');
	process.kill(pids[1]!, 'SIGINT');
	await app.waitForLog('signal received by the worker; waiting for the primary to drain it', {count: 2});
	for (const pid of pids) {
		t.true(isAlive(pid));
	}

	for (let i = 0; i < 4; i++) {
		t.is((await client(url(app.port, '/'))).statusCode, 200);
	}

	t.falsy(app.lines.find(line => line.msg === 'drain started'));
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('Ctrl-C to the whole process group is one drain: in-flight requests finish, exit 0', async t => {
	const app = await startCluster(t, ['--reject-period', '800ms', '--grace-period', '10s'], fixture('app.mjs'));
	const slow = client(url(app.port, '/slow?ms=1500'));
	await app.waitForLog('fixture request started');
	app.killGroup('SIGINT');
	const done = await slow;
	t.is(done.statusCode, 200);
	t.is(done.body.length, 100_000);
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.is(app.lines.filter(line => line.role === 'primary' && line.msg === 'drain started').length, 1);
	t.falsy(app.lines.find(line => line.msg === 'second signal during the drain; killing the workers now'));
});

test('a signal repeated at once (a terminal\'s and a wrapper\'s copy) is one drain; a later second signal ends it with code 4', async t => {
	const app = await startCluster(t, ['--reject-period', '20s', '--grace-period', '60s'], fixture('app.mjs'));
	// Back to back, with no round trip between them. Two different signals: the
	// kernel merges a copy of a signal that is still pending, but never two
	// different ones, so both reach the primary, the second within the window.
	app.kill('SIGTERM');
	app.kill('SIGINT');
	const repeated = await app.waitForLog('repeated signal right after the first; ignoring it');
	const drains = app.lines.filter(line => line.role === 'primary' && line.msg === 'drain started');
	t.is(drains.length, 1, 'one drain');
	// Which one is first is the kernel's choice (of two pending signals it delivers the lower-numbered SIGINT first).
	t.deepEqual([drains[0]!['signal'], repeated['signal']].sort(), ['SIGINT', 'SIGTERM']);
	t.falsy(app.lines.find(line => line.msg === 'second signal during the drain; killing the workers now'));
	// A second later (the first progress line) the user is impatient.
	await app.waitForLog('drain progress');
	const pids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	const secondAt = app.kill('SIGINT');
	const exit = await app.exited;
	t.is(exit.code, 4, app.text());
	t.true(exit.at - secondAt < 2000, 'exits at once');
	t.is(app.lines.filter(line => line.msg === 'killing worker').length, 2);
	for (const pid of pids) {
		t.false(isAlive(pid), `worker ${pid} was killed`);
	}
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'forced', exitCode: 4});
});

test('stray signals to the whole group (SIGALRM, SIGVTALRM, SIGXCPU ...) kill nothing: logged, ignored, every worker still serves', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('app.mjs'));
	const pids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	const ignored = ['SIGALRM', 'SIGVTALRM', 'SIGIO', 'SIGPWR', 'SIGSTKFLT', 'SIGTRAP', 'SIGSYS', 'SIGXCPU'] as const;
	for (const signal of ignored) {
		app.killGroup(signal);
		await app.waitForLog(line => line.role === 'primary' && line['signal'] === signal && line.level === 'warn');
	}

	// The workers logged each one too, and none of them died.
	await app.waitForLog(line => line.role === 'worker' && line['signal'] === 'SIGXCPU', {count: 2});
	for (const pid of pids) {
		t.true(isAlive(pid), `worker ${pid}`);
	}

	t.is((await client(url(app.port, '/'))).body, 'hello');
	t.falsy(app.lines.find(line => line.msg === 'drain started' || line.msg === 'worker exited'));
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('a CPU profiler started in a --require preload (an APM agent\'s) keeps sampling in the primary and every worker: SIGPROF is V8\'s, not ours', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms'], fixture('app.mjs'), {env: {NODE_OPTIONS: `--require ${fixture('profiler-preload.cjs')}`}});
	await app.waitForLog('profiler samples', {count: 3});
	const reports = app.lines.filter(line => line.msg === 'profiler samples');
	t.deepEqual(reports.map(line => line['profiled']).sort(), ['primary', 'worker', 'worker']);
	for (const report of reports) {
		// Up to 200 at one a millisecond (fewer on a busy machine); a handler of ours for SIGPROF left none.
		t.true(Number(report['samples']) >= 10, JSON.stringify(report));
	}

	for (const pid of [app.pid, ...app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']))]) {
		t.false(catches(pid, os.constants.signals.SIGPROF), `process ${pid} has no SIGPROF handler`);
	}

	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

const SET_ASIDE = 'a signal listener that is not graceful-cluster\'s was set aside in the primary';

/** The CLI with test/fixtures/exiting-preload.cjs in NODE_OPTIONS, both its listeners set aside in the primary, and a 1.2 s request started. */
async function withExitingPreload(t: ExecutionContext) {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s'], fixture('app.mjs'), {env: {NODE_OPTIONS: `--require ${fixture('exiting-preload.cjs')}`}});
	// The late SIGINT listener too: the primary's and both workers'.
	await app.waitForLog('preload late listener added', {count: 3});
	await app.waitForLog(SET_ASIDE, {count: 2});
	const slow = client(url(app.port, '/slow?ms=1200'));
	await app.waitForLog('fixture request started');
	return {app, slow};
}

/** A 1.2 s request in flight when `send` signals: it is served whole, and the CLI exits 0. */
async function inFlightFinishes(t: ExecutionContext, app: Awaited<ReturnType<typeof startCluster>>, send: () => void): Promise<void> {
	const slow = client(url(app.port, '/slow?ms=1200'));
	await app.waitForLog('fixture request started');
	send();
	const done = await slow;
	t.is(done.statusCode, 200);
	t.is(done.body.length, 100_000);
	t.is((await app.exited).code, 0, app.text());
}

test('a NODE_OPTIONS preload\'s SIGTERM listener that exits (OpenTelemetry\'s guide) does not end the primary: it is set aside there, named in a warning, and runs in each worker after the drain', async t => {
	const {app, slow} = await withExitingPreload(t);
	t.deepEqual(app.lines.filter(line => line.msg === SET_ASIDE).map(line => [line['signal'], line['listener']]).sort(), [['SIGINT', 'lateAgentExit'], ['SIGTERM', 'otelShutdown']]);
	app.kill('SIGTERM');
	const done = await slow;
	t.is(done.statusCode, 200);
	t.is(done.body.length, 100_000);
	t.is((await app.exited).code, 0, app.text());
	const ran = app.lines.filter(line => line.msg === 'preload listener ran');
	t.deepEqual(ran.map(line => `${String(line['role'])} ${String(line['what'])}`), ['worker SIGTERM', 'worker SIGTERM']);
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', served: 1});
});

test('Ctrl-C to the group with a preload\'s SIGINT listener that exits at once: the primary drains, the request in flight finishes', async t => {
	const {app, slow} = await withExitingPreload(t);
	app.killGroup('SIGINT');
	const done = await slow;
	t.is(done.statusCode, 200);
	t.is(done.body.length, 100_000);
	t.is((await app.exited).code, 0, app.text());
	t.false(app.lines.some(line => line.msg === 'preload listener ran' && line['role'] === 'primary'), app.text());
});

for (const removed of ['SIGTERM', 'every'] as const) {
	test(`a preload that takes ${removed === 'every' ? 'every listener of every event' : 'every SIGTERM listener'} off in the primary (removeAllListeners): ours is put back, with a warning; SIGTERM still drains, the request in flight finishes`, async t => {
		const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s'], fixture('app.mjs'), {env: {NODE_OPTIONS: `--require ${fixture('exiting-preload.cjs')}`, PRELOAD_REMOVE_ALL: removed}});
		await app.waitForLog('preload removed the listeners');
		t.like(await app.waitForLog('another module took graceful-cluster\'s signal listener off in the primary; it is back'), {signal: 'SIGTERM'});
		await inFlightFinishes(t, app, () => app.kill('SIGTERM'));
		t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', served: 1});
	});
}

test('SIGQUIT to the group (Ctrl-\\) drains like SIGTERM: the request in flight finishes, exit 0', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '10s'], fixture('app.mjs'));
	await inFlightFinishes(t, app, () => app.killGroup('SIGQUIT'));
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain started'), {signal: 'SIGQUIT'});
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean'});
});

test('SIGUSR2 reloads like SIGHUP: every worker replaced, none of them died of the signal', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('app.mjs'));
	app.kill('SIGUSR2');
	t.like(await app.waitForLog('reload finished', {timeout: 20_000}), {replaced: 2});
	t.is((await client(url(app.port, '/'))).body, 'hello');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.msg === 'worker started').length, 4);
});

/** True once the process has a handler for `signal` (its SigCgt mask in /proc). */
function catches(pid: number, signal: number): boolean {
	try {
		const status = readFileSync(`/proc/${pid}/status`, 'utf8');
		const mask = BigInt(`0x${/^SigCgt:\s*([\da-f]+)$/m.exec(status)![1]}`);
		return (mask & (1n << BigInt(signal - 1))) !== 0n;
	} catch {
		return false;
	}
}

test('a SIGTERM while the CLI is still loading is held and ends it once the primary exists: exit 0, not 143, no worker started', async t => {
	const app = start(t, ['-w', '2', '--reject-period', '200ms', fixture('app.mjs')]);
	// The first thing the CLI does is hold the signals; loading the rest takes
	// longer. (Node itself catches SIGTERM from its start, to exit; SIGUSR2 is ours.)
	t.true(await eventually(() => catches(app.pid, os.constants.signals.SIGUSR2), {timeout: 5000, interval: 1}));
	app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.truthy(app.lines.find(line => line.msg === 'signal received while graceful-cluster was loading; acting on it now'), 'the held signal was handed over');
	t.like(app.lines.find(line => line.msg === 'signal received before any worker started: nothing to drain; exiting'), {signal: 'SIGTERM'});
	// A drain of no worker reported a reject phase that never ran, then 'starting workers'.
	t.deepEqual(app.lines.filter(line => ['drain started', 'drain finished', 'starting workers', 'worker started'].includes(line.msg ?? '')), [], 'nothing was started, nothing drained');
});

test('an app that calls process.removeAllListeners() keeps the drain: a group SIGQUIT drains, the request in flight finishes', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s'], fixture('removes-listeners.mjs'));
	const slow = client(url(app.port, '/?ms=800'));
	await app.waitForLog('fixture request started');
	app.killGroup('SIGQUIT');
	t.is((await slow).body, 'done');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean'});
});

test('a person\'s Ctrl-C twice, 250 ms apart, to the whole group: the second forces the exit, code 4', async t => {
	const app = await startCluster(t, ['--reject-period', '20s', '--grace-period', '60s'], fixture('app.mjs'));
	app.killGroup('SIGINT');
	await app.waitForLog(line => line.role === 'primary' && line.msg === 'drain started');
	// The stimulus is the spacing itself: a fast double press.
	await delay(250);
	app.killGroup('SIGINT');
	t.is((await app.exited).code, 4, app.text());
	t.truthy(app.lines.find(line => line.msg === 'second signal during the drain; killing the workers now'));
	t.falsy(app.lines.find(line => line.msg === 'repeated signal right after the first; ignoring it'));
	t.true(app.lines.filter(line => line.msg === 'worker exited').every(line => line['reason'] === 'second-signal' && line['killedFor'] === 'second-signal'), app.text());
});

test('one Ctrl-C through `npm start` (bash as the script shell, which forwards to the CLI itself): npm\'s forwarded copy is the same Ctrl-C; one clean drain, exit 0', async t => {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-npm-'));
	t.teardown(() => {
		rmSync(dir, {recursive: true, force: true});
	});
	writeFileSync(path.join(dir, 'package.json'), JSON.stringify({name: 'app', private: true, scripts: {start: `node ${CLI} --workers 1 --reject-period 300ms ${fixture('app.mjs')}`}}));
	const app = start(t, ['--script-shell', 'bash', 'start'], {command: 'npm', cwd: dir});
	await app.waitForLog('worker listening');
	app.killGroup('SIGINT');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.role === 'primary' && line.msg === 'drain started').length, 1);
	t.falsy(app.lines.find(line => line.msg === 'second signal during the drain; killing the workers now'), app.text());
});
