// The end of the app's shutdown as plain Node would end it: the exit code the
// app sets is never turned into a clean 0, and its 'beforeExit' cleanup runs.
import test from 'ava';
import {fixture, start, startCluster, type Proc} from '../helpers/cluster.js';

const primaryFinished = (app: Proc) => app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');
const named = (app: Proc) => app.lines.filter(line => line.msg === 'the app\'s shutdown set a failing exit code (process.exitCode)').map(line => [line['hook'], line['exitCode']]);

test('an async onShutdown hook that sets process.exitCode = 2: a failed shutdown, the hook and the code named, exit 7', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {workers: 2, env: {FIXTURE_HOOK: 'exitcode'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.deepEqual(named(app), [['reportFailure', 2], ['reportFailure', 2]]);
	t.is(app.lines.filter(line => line.msg === 'a shutdown hook exited the worker with a failure' && line['code'] === 2).length, 2);
	t.like(primaryFinished(app), {level: 'error', outcome: 'hooks-failed', hooksFailed: 2, workersLost: 0, exitCode: 7});
});

test('standalone: the same hook: the process exits 2, as under plain Node, and drain finished says so', async t => {
	const app = start(t, [fixture('hooks.mjs')], {plainNode: true, env: {FIXTURE_HOOK: 'exitcode', GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
	await app.waitForLog('fixture listening');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 2, app.text());
	t.deepEqual(named(app), [['reportFailure', 2]]);
	t.like(app.lines.find(line => line.msg === 'drain finished'), {level: 'error', outcome: 'hooks-failed', hooksFailed: 1, exitCode: 2});
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
