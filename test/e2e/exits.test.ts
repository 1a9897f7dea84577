// The end of the app's shutdown as plain Node would end it: the exit code the
// app sets is never turned into a clean 0, and its 'beforeExit' cleanup runs.
import net from 'node:net';
import test from 'ava';
import {fixture, start, startCluster, type Proc} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

const primaryFinished = (app: Proc) => app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');
/** Blamed on the app's exit-time listeners: the code named already is not theirs. */
const blamedOnExitListeners = (app: Proc) => app.lines.filter(line => line.msg === 'the app\'s shutdown exited with a failing code' && line['hook'] === 'the app\'s beforeExit or exit listeners');
/** graceful-cluster's own last line: `drain finished`, written last. */
const lastOwnLine = (app: Proc) => app.lines.filter(line => line.role !== 'fixture').at(-1)?.msg;
const named = (app: Proc) => app.lines.filter(line => line.msg === 'the app\'s shutdown set a failing exit code (process.exitCode)').map(line => [line['hook'], line['exitCode']]);

test('an async onShutdown hook that sets process.exitCode = 2: a failed shutdown, the hook and the code named, exit 7', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {workers: 2, env: {FIXTURE_HOOK: 'exitcode'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.deepEqual(named(app), [['reportFailure', 2], ['reportFailure', 2]]);
	t.is(app.lines.filter(line => line.msg === 'a shutdown hook exited the worker with a failure' && line['code'] === 2).length, 2);
	t.like(primaryFinished(app), {level: 'error', outcome: 'hooks-failed', hooksFailed: 2, workersLost: 0, exitCode: 7});
	t.deepEqual(blamedOnExitListeners(app), []);
});

test('standalone: the same hook: the process exits 2, as under plain Node, and drain finished says so', async t => {
	const app = start(t, [fixture('hooks.mjs')], {plainNode: true, env: {FIXTURE_HOOK: 'exitcode', GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
	await app.waitForLog('fixture listening');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 2, app.text());
	t.deepEqual(named(app), [['reportFailure', 2]]);
	t.like(app.lines.find(line => line.msg === 'drain finished'), {level: 'error', outcome: 'hooks-failed', hooksFailed: 1, exitCode: 2});
	t.deepEqual(blamedOnExitListeners(app), [], 'the code is the hook\'s, named already');
	t.is(lastOwnLine(app), 'drain finished');
});

test('the app\'s own SIGTERM listener that sets process.exitCode once its server closed: named with the code, exit 7; standalone exits 2', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {workers: 1, env: {FIXTURE_HOOK: 'none', FIXTURE_LISTENER: 'exitcode'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.deepEqual(named(app), [['SIGTERM listener closeAndReport', 2]]);
	t.like(primaryFinished(app), {outcome: 'hooks-failed', hooksFailed: 1, exitCode: 7});

	const alone = start(t, [fixture('hooks.mjs')], {plainNode: true, env: {FIXTURE_HOOK: 'none', FIXTURE_LISTENER: 'exitcode', GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
	await alone.waitForLog('fixture listening');
	alone.kill('SIGTERM');
	t.is((await alone.exited).code, 2, alone.text());
	t.deepEqual(named(alone), [['SIGTERM listener closeAndReport', 2]]);
	t.like(alone.lines.find(line => line.msg === 'drain finished'), {outcome: 'hooks-failed', exitCode: 2});
	t.deepEqual(blamedOnExitListeners(app), []);
	t.deepEqual(blamedOnExitListeners(alone), [], 'the code is the listener\'s, named already');
	t.is(lastOwnLine(alone), 'drain finished');
});

test('an unchanged app whose client disconnects on beforeExit (Prisma): the 300 ms disconnect completes in every worker before it exits, then its exit listener runs; exit 0', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('exit-cleanup.mjs'), {workers: 2, env: {FIXTURE_EXIT_LISTENER: 'yes'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.msg === 'fixture disconnected').length, 2, app.text());
	t.is(app.lines.filter(line => line.msg === 'fixture exit listener' && line['code'] === 0).length, 2);
	for (const pid of new Set(app.lines.filter(line => line.msg === 'fixture disconnected').map(line => line.pid))) {
		const order = app.lines.filter(line => line.pid === pid).map(line => line.msg);
		t.true(order.indexOf('fixture disconnected') < order.indexOf('fixture exit listener'), order.join(' / '));
	}

	t.like(primaryFinished(app), {outcome: 'clean', hooksFailed: 0, exitCode: 0});
});

test('a beforeExit cleanup that rejects counts as a failed shutdown, named: exit 7', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('exit-cleanup.mjs'), {workers: 1, env: {FIXTURE_CLEANUP: 'fail'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.like(app.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'), {hook: 'beforeExit listener disconnect'});
	t.like(primaryFinished(app), {outcome: 'hooks-failed', hooksFailed: 1, workersLost: 0, exitCode: 7});
});

test('a queue consumer (no server) with --listen-timeout 0: its own SIGTERM listener runs at the signal, not after the reject period; the job under way finishes, no job starts after; exit 0', async t => {
	const app = start(t, ['--workers', '2', '--listen-timeout', '0', '--reject-period', '20s', '--grace-period', '30s', fixture('consumer.mjs')]);
	await app.waitForLog(line => line.msg === 'fixture job started' && line['job'] === 2);
	const signalAt = app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.true(exit.at - signalAt < 5000, `ended ${exit.at - signalAt} ms after the signal, the reject period is 20 s`);
	const pids = new Set(app.lines.filter(line => line.msg === 'fixture consumer ready').map(line => line.pid));
	t.is(pids.size, 2);
	for (const pid of pids) {
		const own = app.lines.filter(line => line.pid === pid && String(line.msg).startsWith('fixture'));
		const stopping = own.findIndex(line => line.msg === 'fixture consumer stopping');
		t.true(stopping > 0, app.text());
		const started = own.filter(line => line.msg === 'fixture job started');
		t.is(own.slice(stopping).filter(line => line.msg === 'fixture job started').length, 0, 'no job after the stop');
		t.truthy(own.find(line => line.msg === 'fixture job done' && line['job'] === started.at(-1)!['job']), 'the job under way finished');
		t.truthy(own.find(line => line.msg === 'fixture consumer stopped'));
	}

	t.is(app.lines.filter(line => line.msg === 'a worker that serves nothing (it never listened): its shutdown starts now').length, 2);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', workersLost: 0, exitCode: 0});
});

test('a queue consumer under the defaults fails to start; the last line names --listen-timeout and what to change', async t => {
	const app = start(t, ['--workers', '1', '--listen-timeout', '1s', '--max-start-failures', '2', '--restart-delay', '10ms', fixture('consumer.mjs')]);
	const exit = await app.exited;
	t.is(exit.code, 6, app.text());
	const last = app.lines.filter(line => line.role === 'primary').at(-1)!;
	t.like(last, {level: 'fatal', killedFor: 'listen-timeout', listenTimeoutMs: 1000});
	t.regex(String(last.msg), /never listened within --listen-timeout 1s.*--listen-timeout 0/);
});

test('a worker that crashes in the reject phase: the 503s it wrote just before are all counted', async t => {
	const app = await startCluster(t, ['--reject-period', '20s', '--grace-period', '30s'], fixture('crash-in-drain.mjs'), {workers: 1});
	const upload = net.connect(app.port, '127.0.0.1');
	t.teardown(() => upload.destroy());
	upload.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n');
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog('rejecting new requests');
	// Within a few milliseconds, well inside one report interval (250 ms).
	let seen = 0;
	for (let index = 0; index < 5; index++) {
		const response = await client(`http://127.0.0.1:${app.port}/`);
		t.is(response.statusCode, 503);
		seen++;
	}

	upload.write('x');
	const exit = await app.exited;
	t.is(exit.code, 5, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {rejected: seen, workersLost: 1, responsesCut: 1});
});

test('a queue consumer with --listen-timeout 0 reloads: each new worker is ready once it runs, then the old one runs its own SIGTERM listener and leaves', async t => {
	const app = start(t, ['--workers', '2', '--listen-timeout', '0', '--reject-period', '20s', fixture('consumer.mjs')], {env: {FIXTURE_JOB_MS: '300'}});
	await app.waitForLog('fixture consumer ready', {count: 2});
	const old = app.lines.filter(line => line.msg === 'fixture consumer ready').map(line => line.pid);
	app.kill('SIGHUP');
	t.like(await app.waitForLog('reload finished'), {replaced: 2});
	for (const pid of old) {
		await app.waitForLog(line => line.pid === pid && line.msg === 'fixture consumer stopped');
	}

	const exits = await app.waitForLog(line => line.msg === 'worker exited', {count: 2}).then(() => app.lines.filter(line => line.msg === 'worker exited'));
	t.deepEqual(exits.map(line => [line['workerPid'], line['code'], line['reason']]).sort(), old.map(pid => [pid, 0, 'reload']).sort());
	const fresh = await app.waitForLog(line => line.msg === 'fixture job started' && !old.includes(line.pid));
	t.truthy(fresh);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('a queue consumer whose own SIGTERM listener fails (process.exitCode = 2 once its job is done): a failed shutdown, named, exit 7, no worker lost', async t => {
	const app = start(t, ['--workers', '1', '--listen-timeout', '0', '--reject-period', '20s', fixture('consumer.mjs')], {env: {FIXTURE_LISTENER: 'fail', FIXTURE_JOB_MS: '300'}});
	await app.waitForLog('fixture job started');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.deepEqual(app.lines.filter(line => line.msg === 'the app\'s shutdown exited with a failing code').map(line => [line['hook'], line['exitCode']]), [['SIGTERM listener stopConsumer', 2]]);
	t.like(app.lines.find(line => line.msg === 'worker exited'), {code: 2, reason: 'drain'});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'hooks-failed', hooksFailed: 1, workersLost: 0, exitCode: 7});
});

test('a queue consumer with no SIGTERM listener (a timer keeps it alive) ends as Node would end it, about a second after the signal, not at the grace period', async t => {
	const app = start(t, ['--workers', '2', '--listen-timeout', '0', '--reject-period', '20s', '--grace-period', '30s', fixture('consumer.mjs')], {env: {FIXTURE_LISTENER: 'none'}});
	await app.waitForLog('fixture job started', {count: 2});
	const signalAt = app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.true(exit.at - signalAt < 5000, `${Math.round(exit.at - signalAt)} ms`);
	t.is(app.lines.filter(line => line.msg === 'the app has no listener for the signal: the worker ends as Node would end it').length, 2);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', workersLost: 0});
});

test('an exit code the app set long before the drain (an error handler\'s process.exitCode = 1) is not its shutdown\'s: said, not counted, exit 0', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('exit-cleanup.mjs'), {workers: 1, env: {FIXTURE_EARLY_CODE: '1'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'the app had set process.exitCode before the drain, not in its shutdown: not counted; the process exits with the drain\'s own verdict'), {level: 'warn', exitCode: 1});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', hooksFailed: 0});
});

test('a beforeExit listener that starts its flush with a callback and returns nothing: the flush completes before the worker exits', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('exit-cleanup.mjs'), {workers: 1, env: {FIXTURE_CLEANUP: 'callback'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.truthy(app.lines.find(line => line.msg === 'fixture disconnected'), app.text());
});
