// The supervisor through a production day: crashes, apps that cannot start, a
// killed primary, noisy output, hostile connections during a drain.
import test from 'ava';
import {spawnSync} from 'node:child_process';
import {once} from 'node:events';
import {readFileSync, readlinkSync, rmSync, writeFileSync} from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {setTimeout as delay} from 'node:timers/promises';
import {RequestError} from 'got';
import {freePort, url} from '../../testkit/net.js';
import {eventually, isAlive} from '../../testkit/proc.js';
import {CLI, fixture, start, startCluster} from '../helpers/cluster.js';
import {client, RawConnection} from '../helpers/http.js';

test('a worker that crashes while running is replaced, with its exit and the restart delay logged', async t => {
	const app = await startCluster(t, ['--restart-delay', '200ms', '--reject-period', '300ms'], fixture('app.mjs'));
	void client(url(app.port, '/crash')).catch(() => undefined);
	const exited = await app.waitForLog('worker exited');
	t.like(exited, {code: 7, signal: null, state: 'listening', level: 'error'});
	t.like(await app.waitForLog('restarting worker'), {delayMs: 200});
	await app.waitForLog('worker listening', {count: 3});
	t.is((await client(url(app.port, '/'))).body, 'hello');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('restart delays grow exponentially, capped', async t => {
	// One worker: while it restarts nobody listens, so a fixed port keeps the address stable.
	const port = await freePort();
	const app = await startCluster(t, ['--restart-delay', '50ms', '--max-restart-delay', '150ms', '--reject-period', '300ms'], fixture('app.mjs'), {workers: 1, env: {PORT: String(port)}});
	const delays: unknown[] = [];
	for (let crash = 1; crash <= 4; crash++) {
		void client(url(port, '/crash')).catch(() => undefined);
		delays.push((await app.waitForLog('restarting worker', {count: crash}))['delayMs']);
		await app.waitForLog('worker listening', {count: crash + 1});
	}

	t.deepEqual(delays, [50, 100, 150, 150]);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('a worker that stayed up --backoff-reset starts its slot\'s restart delay over', async t => {
	const port = await freePort();
	const app = await startCluster(t, ['--restart-delay', '50ms', '--max-restart-delay', '1s', '--backoff-reset', '4s', '--reject-period', '300ms'], fixture('app.mjs'), {workers: 1, env: {PORT: String(port)}});
	const crash = async (count: number) => {
		void client(url(port, '/crash')).catch(() => undefined);
		const restart = await app.waitForLog('restarting worker', {count});
		await app.waitForLog('worker listening', {count: count + 1});
		return restart['delayMs'];
	};

	t.is(await crash(1), 50);
	t.is(await crash(2), 100, 'a crash soon after the last one doubles the delay');
	// The thing under test is an uptime, so this wait is on the clock.
	await delay(4200);
	t.is(await crash(3), 50, 'after an uptime of --backoff-reset the delay starts over');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('an app that crashes before it listens: a few tries, then exit 6 with the app\'s own error', async t => {
	const app = start(t, ['-w', '1', '--max-start-failures', '3', '--restart-delay', '10ms', fixture('crash-on-start.mjs')]);
	const exit = await app.exited;
	t.is(exit.code, 6, app.text());
	const fatal = app.lines.find(line => line.level === 'fatal');
	t.regex(String(fatal?.msg), /failed to start/);
	t.regex(JSON.stringify(fatal?.['stderr']), /cannot connect to the database at db:5432/);
	t.is(app.lines.filter(line => line.msg === 'worker started').length, 3, 'gave up after the third failed start');
});

test('an app that never listens counts as failed after --listen-timeout', async t => {
	const app = start(t, ['-w', '1', '--listen-timeout', '500ms', '--max-start-failures', '2', '--restart-delay', '10ms', fixture('never-listens.mjs')]);
	const exit = await app.exited;
	t.is(exit.code, 6, app.text());
	t.is(app.lines.filter(line => line.msg === 'worker did not listen in time; killing it').length, 2);
});

test('no restarts during a drain; a worker that crashes mid-drain is logged with its in-flight count, exit 5', async t => {
	const app = await startCluster(t, ['--serve-period', '3s', '--reject-period', '500ms', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
	// The worker dies with this request in flight: its connection closes before a
	// byte of the response, which got reports as a hang-up. Asserted now (the
	// rejection may come before the test gets there), awaited below.
	const slow = t.throwsAsync(client(url(app.port, '/slow?ms=5000')), {instanceOf: RequestError, code: 'ECONNRESET', message: 'socket hang up'});
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started');
	void client(url(app.port, '/crash')).catch(() => undefined);
	const exited = await app.waitForLog('worker exited');
	// Its counts as it exited (worker/drain.ts `exiting`): the slow request, and /crash itself.
	t.like(exited, {code: 7, inflight: 2}, 'the in-flight count the worker last reported');
	await slow;
	const exit = await app.exited;
	t.is(exit.code, 5, app.text());
	t.falsy(app.lines.find(line => line.msg === 'restarting worker'));
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'forced', exitCode: 5});
});

test('the primary killed with SIGKILL: every worker exits within two seconds, the port is free', async t => {
	const app = await startCluster(t, [], fixture('app.mjs'));
	const pids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	app.kill('SIGKILL');
	await app.exited;
	// Another process's death has no event here to wait on: poll, bounded.
	t.true(await eventually(() => pids.every(pid => !isAlive(pid)), {timeout: 2000, interval: 25}), 'workers gone');
	await t.throwsAsync(client(url(app.port, '/'), {timeout: {request: 2000}}), {code: 'ECONNREFUSED'});
});

test('workers\' long output lines reach stdout whole, never interleaved', async t => {
	const lines = 40;
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('noisy.mjs'), {workers: 2, env: {NOISY_LINES: String(lines), NOISY_SIZE: '100000'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text().slice(-2000));
	const noisy = app.lines.filter(line => line.msg === 'noisy line');
	t.is(noisy.length, 2 * lines, 'every line parsed as whole JSON');
	t.true(noisy.every(line => String(line['padding']).length === 100_000));
	t.is((app.text().match(/noisy: a line on stderr/g) ?? []).length, 2);
});

for (const [how, env, appLine] of [
	['process.stdout.write, ended by its shutdown hook', {FIXTURE_WRITE: 'stdout'}, 'progress: 50% done'],
	['fs.writeSync(1), never ended', {FIXTURE_WRITE: 'fd', FIXTURE_END: '0'}, 'progress: 50%'],
] as const) {
	test(`a line the app leaves unfinished (${how}) does not swallow the drain's log lines`, async t => {
		const app = start(t, ['--workers', '1', '--reject-period', '200ms', fixture('partial-line.mjs')], {env});
		let stdout = '';
		app.child.stdout!.on('data', (chunk: string) => {
			stdout += chunk;
		});
		await app.waitForLog('worker listening');
		app.kill('SIGTERM');
		t.is((await app.exited).code, 0, app.text());
		const lines = stdout.split('\n');
		for (const line of lines.filter(line => line.startsWith('{'))) {
			t.notThrows(() => JSON.parse(line), line);
		}

		t.true(lines.includes(appLine), `the app's text, a line of its own:\n${stdout}`);
		for (const msg of ['drain started', 'rejecting new requests', 'worker drained']) {
			t.truthy(app.lines.find(line => line.role === 'worker' && line.msg === msg), msg);
		}
	});
}

test('a slowloris connection and garbage bytes do not hold the drain past the reject phase', async t => {
	const rejectMs = 800;
	const app = await startCluster(t, ['--reject-period', `${rejectMs}ms`, '--grace-period', '20s'], fixture('app.mjs'));
	const slowloris = await RawConnection.open(app.port);
	slowloris.socket.write('GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ');
	const garbage = await RawConnection.open(app.port);
	const signalledAt = app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started', {count: 2});
	garbage.socket.write('\u0000\u0001\u0002 not http at all\r\n\r\n');
	t.is(await garbage.closedByServer(), 'fin', 'Node answers garbage with 400 and closes, during the drain too');
	slowloris.socket.write('still');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	const elapsed = exit.at - signalledAt;
	t.true(elapsed >= rejectMs && elapsed < rejectMs + 1500, `exited ${Math.round(elapsed)} ms after the signal`);
	t.is(await slowloris.closedByServer(), 'fin', 'the half-sent request is closed when the drain ends');
});

test('an app that cannot bind its port (in use) is a failed start: exit 6 with EADDRINUSE in the report', async t => {
	const blocker = net.createServer().listen(0);
	await once(blocker, 'listening');
	t.teardown(() => blocker.close());
	const {port} = blocker.address() as net.AddressInfo;
	const app = start(t, ['-w', '1', '--max-start-failures', '2', '--restart-delay', '10ms', fixture('app.mjs')], {env: {PORT: String(port)}});
	t.is((await app.exited).code, 6, app.text());
	t.regex(JSON.stringify(app.lines.find(line => line.level === 'fatal')?.['stderr']), /EADDRINUSE/);
});

test('the start-up line says how the worker count was chosen', async t => {
	const flagged = await startCluster(t, ['--reject-period', '0'], fixture('app.mjs'), {workers: 2});
	t.like(flagged.lines.find(line => line.msg === 'starting workers'), {workers: 2, workersFrom: 'flag'});
	flagged.kill('SIGTERM');
	await flagged.exited;
	const auto = start(t, ['--reject-period', '0', fixture('app.mjs')]);
	const line = await auto.waitForLog('starting workers');
	t.true(['cgroup-v2', 'cgroup-v1', 'available-parallelism'].includes(String(line['workersFrom'])));
	t.true(Number(line['workers']) >= 1);
	t.is(line['availableParallelism'], os.availableParallelism());
	auto.kill('SIGTERM');
	t.is((await auto.exited).code, 0);
});

// Needs a PID namespace (root, as CI runs); without one there is nothing to test.
const canUnshare = spawnSync('unshare', ['--fork', '--pid', '--mount-proc', 'true']).status === 0;

(canUnshare ? test : test.skip)('as PID 1 of a container (its own PID namespace), a clean drain exits 0, not 143', async t => {
	const app = start(t, ['--fork', '--pid', '--mount-proc', process.execPath, CLI, '-w', '1', '--reject-period', '300ms', fixture('app.mjs')], {command: 'unshare'});
	await app.waitForLog('worker listening');
	t.is(app.lines.find(line => line.msg === 'starting workers')?.['pid'], 1, 'the primary is PID 1 in its namespace');
	t.like(app.lines.find(line => String(line.msg).startsWith('graceful-cluster is PID 1 with no init in front')), {level: 'warn'});
	// From outside, the primary is the unshare process's only child.
	const primaryPid = Number(readFileSync(`/proc/${app.pid}/task/${app.pid}/children`, 'utf8').trim());
	process.kill(primaryPid, 'SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
});

const hasTini = spawnSync('tini', ['--version']).status === 0;

(canUnshare && hasTini ? test : test.skip)('with tini as PID 1 (the Dockerfile\'s), a SIGTERM the moment the container starts is not lost: it ends at once; later, it drains, with no PID 1 warning', async t => {
	const early = start(t, ['--fork', '--pid', '--mount-proc', 'tini', '--', process.execPath, CLI, '-w', '1', '--reject-period', '300ms', fixture('app.mjs')], {command: 'unshare'});
	// Once the container's PID 1 is tini (unshare's fork has exec'd it), as when a runtime starts it.
	let init = 0;
	t.true(await eventually(() => {
		try {
			init = Number(readFileSync(`/proc/${early.pid}/task/${early.pid}/children`, 'utf8').trim());
			return init > 0 && readlinkSync(`/proc/${init}/exe`).endsWith('/tini');
		} catch {
			return false;
		}
	}, {timeout: 5000, interval: 1}));
	// 10 ms in: tini has set up its signals (a fraction of a millisecond), Node has
	// not (it takes 60-80 ms: bench/signals.js, where graceful-cluster as PID 1 drops it).
	await delay(10);
	process.kill(init, 'SIGTERM');
	const exit = await early.exitWithin(5000);
	t.truthy(exit, 'ended: the signal was not dropped');
	t.falsy(early.lines.find(line => line.msg === 'starting workers'), 'during Node\'s own start');

	const later = start(t, ['--fork', '--pid', '--mount-proc', 'tini', '--', process.execPath, CLI, '-w', '1', '--reject-period', '300ms', fixture('app.mjs')], {command: 'unshare'});
	await later.waitForLog('worker listening');
	process.kill(Number(readFileSync(`/proc/${later.pid}/task/${later.pid}/children`, 'utf8').trim()), 'SIGTERM');
	t.is((await later.exited).code, 0, later.text());
	t.like(later.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean'});
	t.falsy(later.lines.find(line => String(line.msg).startsWith('graceful-cluster is PID 1')));
});

test('a slot that keeps failing to start while other workers serve does not stop the cluster', async t => {
	const flag = path.join(os.tmpdir(), `gc-flaky-${process.pid}-${Date.now()}`);
	t.teardown(() => rmSync(flag, {force: true}));
	const app = await startCluster(t, ['--max-start-failures', '2', '--restart-delay', '20ms', '--max-restart-delay', '100ms', '--reject-period', '300ms'], fixture('app.mjs'), {env: {FIXTURE_FAIL_IF_EXISTS: flag}});
	writeFileSync(flag, 'broken');
	void client(url(app.port, '/crash')).catch(() => undefined);
	// Well past --max-start-failures: still retrying, the healthy worker still serving.
	await app.waitForLog(line => line.msg === 'restarting worker' && Number(line['failuresInARow']) >= 4);
	t.is((await client(url(app.port, '/'))).body, 'hello');
	t.falsy(app.lines.find(line => line.level === 'fatal'));
	rmSync(flag);
	await app.waitForLog('worker listening', {count: 3});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('the app\'s own child processes do not inherit the worker bootstrap: SIGTERM ends them', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('app.mjs'));
	const response = await client(url(app.port, '/fork'));
	const report = JSON.parse(response.body) as {execArgv: string[]; signal: string | null};
	t.false(report.execArgv.some(arg => arg.includes('bootstrap')), JSON.stringify(report.execArgv));
	t.is(report.signal, 'SIGTERM');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});
