// The app's own shutdown code under the drain: hooks that exit, print, hang, and
// the hand-written SIGTERM handler graceful-cluster holds and runs last.
import test from 'ava';
import {fixture, start, startCluster, type LogLine, type Proc} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

const url = (port: number, path: string) => `http://127.0.0.1:${port}${path}`;
const handlerRuns = (app: Proc) => app.lines.filter(line => line.msg === 'fixture signal handler');
const indexOf = (app: Proc, match: (line: LogLine) => boolean) => app.lines.findIndex(match);

for (const [how, send] of [['the whole group (Ctrl-C, systemd)', 'killGroup'], ['the primary only (Kubernetes, Docker)', 'kill']] as const) {
	test(`the app's own SIGTERM handler runs once, after the last request, when the signal reaches ${how}`, async t => {
		const app = await startCluster(t, ['--reject-period', '1s', '--grace-period', '15s'], fixture('own-signal-handler.mjs'), {workers: 1});
		const slow = client(url(app.port, '/slow?ms=2000'));
		await app.waitForLog('fixture request started');
		app[send]('SIGTERM');
		await app.waitForLog('rejecting new requests');
		const rejected = await client(url(app.port, '/'));
		t.is(rejected.statusCode, 503, 'the reject phase is served');
		t.is((await slow).statusCode, 200, 'the request in flight finishes');
		const exit = await app.exited;
		t.is(exit.code, 0, app.text());
		t.is(handlerRuns(app).length, 1, app.text());
		t.like(handlerRuns(app)[0], {signal: 'SIGTERM'});
		t.true(indexOf(app, line => line.msg === 'fixture request finished') < indexOf(app, line => line.msg === 'fixture signal handler'), 'after the last request');
		t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	});
}

test('one shutdown function registered for both SIGTERM and SIGINT runs once per worker, with the signal received', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('one-shutdown-both-signals.mjs'), {workers: 2});
	app.killGroup('SIGINT');
	t.is((await app.exited).code, 0, app.text());
	const runs = app.lines.filter(line => line.msg === 'fixture shutdown');
	t.is(runs.length, 2, 'once in each of the two workers');
	t.true(runs.every(line => line['signal'] === 'SIGINT'));
	t.falsy(app.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'), 'the pool was not ended twice');
});

test('standalone: the app\'s own handler, registered before attach(), runs once after the drain', async t => {
	const app = start(t, [fixture('own-signal-handler.mjs')], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: '500ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
	const line = await app.waitForLog('fixture listening');
	const slow = client(url(Number(line['port']), '/slow?ms=1500'));
	await app.waitForLog('fixture request started');
	app.kill('SIGINT');
	t.is((await slow).statusCode, 200);
	t.is((await app.exited).code, 0, app.text());
	// The listeners run in the order registered, with the signal received; the
	// first one's process.exit(0) ends the process.
	t.deepEqual(handlerRuns(app).map(run => run['signal']), ['SIGINT'], app.text());
	t.true(indexOf(app, line => line.msg === 'fixture request finished') < indexOf(app, line => line.msg === 'fixture signal handler'));
});

test('a shutdown hook that ends with process.exit(0) is a clean drain: exit 0', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {env: {FIXTURE_HOOK: 'exit0'}});
	app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.is(app.lines.filter(line => line.msg === 'fixture hook exiting').length, 2);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	t.is(app.lines.filter(line => line.msg === 'worker exited' && line['state'] === 'hooks').length, 2);
});

test('process.exit(3) in a shutdown hook is a failed hook, logged with its code: exit 7, no request lost', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {workers: 1, env: {FIXTURE_HOOK: 'exit3'}});
	app.kill('SIGTERM');
	const exit = await app.exited;
	t.is(exit.code, 7, app.text());
	t.like(app.lines.find(line => line.msg === 'a shutdown hook exited the worker with a failure'), {level: 'error', code: 3});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'hooks-failed', hooksFailed: 1, workersLost: 0, exitCode: 7});
});

test('50,000 lines printed by a shutdown hook all arrive, in order', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '30s'], fixture('hooks.mjs'), {workers: 1, env: {FIXTURE_HOOK: 'print', FIXTURE_LINES: '50000'}});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text().slice(-2000));
	const seqs = app.lines.filter(line => line.msg === 'fixture hook line').map(line => line['seq']);
	t.is(seqs.length, 50_000);
	t.true(seqs.every((seq, index) => seq === index), 'in order');
});

test('a hook that hangs is visible: the start line, the slow-hook line with its name, the near-deadline warning', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '4s'], fixture('hooks.mjs'), {workers: 1, env: {FIXTURE_HOOK: 'hang'}});
	app.kill('SIGTERM');
	t.like(await app.waitForLog('running shutdown hooks'), {hooks: ['closeDatabasePool']});
	t.like(await app.waitForLog('a shutdown hook is taking more than a second'), {hook: 'closeDatabasePool', level: 'warn'});
	t.like(await app.waitForLog('shutdown hooks still running as the deadline nears'), {hook: 'closeDatabasePool', level: 'warn'});
	t.is((await app.exited).code, 3, app.text());
});

test('the app\'s listener that starts work and returns: the worker waits for that work, says what is still open, then ends on its own', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '15s'], fixture('hooks.mjs'), {workers: 1, env: {FIXTURE_HOOK: 'none', FIXTURE_LISTENER: 'work'}});
	app.kill('SIGTERM');
	t.like(await app.waitForLog('running the app\'s own signal listeners'), {listeners: ['SIGTERM listener flushQueue'], signal: 'SIGTERM'});
	const waiting = await app.waitForLog('waiting for the app\'s own shutdown to finish');
	t.like(waiting, {listeners: ['SIGTERM listener flushQueue']});
	t.true(Number((waiting['open'] as Record<string, number>)['Timeout']) >= 1, JSON.stringify(waiting['open']));
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.true(indexOf(app, line => line.msg === 'fixture listener work done') < indexOf(app, line => line.msg === 'worker drained'), 'the work ran to its end before the worker said it drained');
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', hooksFailed: 0});
});

test('standalone: the app\'s listener\'s work is waited for too; exit 0 once it is done', async t => {
	const app = start(t, [fixture('hooks.mjs')], {plainNode: true, env: {FIXTURE_HOOK: 'none', FIXTURE_LISTENER: 'work', GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '15s'}});
	await app.waitForLog('fixture listening');
	app.kill('SIGINT');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'fixture listener started'), {signal: 'SIGINT'});
	t.true(indexOf(app, line => line.msg === 'fixture listener work done') < indexOf(app, line => line.msg === 'drain finished'));
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
});

test('a hook that throws and a listener that throws: both counted, exit 7, every request served', async t => {
	const app = await startCluster(t, ['--reject-period', '200ms', '--grace-period', '10s'], fixture('hooks.mjs'), {workers: 2, env: {FIXTURE_HOOK: 'throw', FIXTURE_LISTENER: 'throw'}});
	const slow = client(url(app.port, '/slow?ms=600'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	t.is((await slow).statusCode, 200);
	const exit = await app.exited;
	t.is(exit.code, 7, app.text());
	t.deepEqual(app.lines.filter(line => line.msg === 'a shutdown hook failed; running the rest').map(line => line['hook']).sort(), ['SIGTERM listener failingListener', 'SIGTERM listener failingListener', 'closePool', 'closePool']);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {level: 'error', outcome: 'hooks-failed', hooksFailed: 4, workersLost: 0, served: 1, exitCode: 7});
});

test('standalone: a hook that throws: exit 7, said in drain finished', async t => {
	const app = start(t, [fixture('hooks.mjs')], {plainNode: true, env: {FIXTURE_HOOK: 'throw', GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s'}});
	await app.waitForLog('fixture listening');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 7, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'hooks-failed', hooksFailed: 1, exitCode: 7});
});
