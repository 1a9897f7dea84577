// SIGHUP: replace every worker, one at a time, under load, without a failed request.
import test from 'ava';
import {rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {freePort, url} from '../../testkit/net.js';
import {isAlive} from '../../testkit/proc.js';
import {fixture, startCluster} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';
import {steadyLoad} from '../helpers/load.js';

// POST: a client sends no retry of a request that may have run, so a keep-alive
// connection closed under one is a failed request.
for (const {attached, post} of [{attached: true, post: false}, {attached: false, post: false}, {attached: false, post: true}]) {
	test(`SIGHUP replaces every worker under steady keep-alive load${post ? ' of POSTs' : ''}: zero failed requests, every pid changes${attached ? '' : ' (an app without attach())'}`, async t => {
		const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s'], fixture('app.mjs'), {env: attached ? {} : {FIXTURE_NO_ATTACH: '1'}});
		const oldPids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
		const load = steadyLoad(app.port, {post});
		t.teardown(async () => load.stop());
		await load.more(200);

		const hupAt = load.results.length;
		app.kill('SIGHUP');
		await app.waitForLog('reload finished');
		t.true(load.results.length - hupAt > 20, 'requests were served while the reload ran');
		// The old workers leave once idle and their keep-alive connections have lingered.
		await app.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {count: 2});
		const doneAt = load.results.length;
		await load.more(300);
		await load.stop();

		const failures = load.results.filter(result => 'error' in result || result.status !== 200);
		t.deepEqual(failures, [], 'no request failed during the reload');
		t.true(load.results.length > 500);
		const newPids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid'])).slice(2);
		t.is(newPids.length, 2);
		for (const pid of oldPids) {
			t.false(isAlive(pid), `old worker ${pid} is gone`);
			t.false(newPids.includes(pid));
		}

		const pidsAfter = new Set(load.results.slice(doneAt).map(result => ('pid' in result ? result.pid : 0)));
		t.deepEqual([...pidsAfter].sort(), [...newPids].sort(), 'after the reload only new workers answer');
		t.like(app.lines.find(line => line.msg === 'reload finished'), {replaced: 2});
		t.falsy(load.results.find(result => 'status' in result && result.status === 503), 'no 503 during a reload');
		t.true(load.results.some(result => 'pid' in result && oldPids.includes(result.pid) && result.connection === 'close'), 'a retiring worker answered its keep-alive stragglers with Connection: close');
		// Each new worker listened before the old worker of its slot began to retire
		// (an attached worker's line; the primary's order is the same without).
		if (attached) {
			const at = (msg: string, worker: unknown) => app.lines.findIndex(line => line.msg === msg && line['worker'] === worker);
			const started = app.lines.filter(line => line.msg === 'worker started' && line['workerRole'] === 'candidate').map(line => line['worker']);
			const retired = app.lines.filter(line => line.msg === 'retiring: replaced by a new worker').map(line => line['worker']);
			t.is(started.length, 2);
			t.is(retired.length, 2);
			for (const [index, candidate] of started.entries()) {
				t.true(at('worker listening', candidate) < at('retiring: replaced by a new worker', retired[index]), `worker ${String(candidate)} listened before worker ${String(retired[index])} retired`);
			}
		}

		app.kill('SIGTERM');
		t.is((await app.exited).code, 0, app.text());
	});
}

test('a replacement that fails to start aborts the reload; the old workers keep serving', async t => {
	const flag = path.join(os.tmpdir(), `gc-bad-deploy-${process.pid}-${Date.now()}`);
	t.teardown(() => rmSync(flag, {force: true}));
	const app = await startCluster(t, ['--reject-period', '300ms', '--max-start-failures', '2'], fixture('app.mjs'), {env: {FIXTURE_FAIL_IF_EXISTS: flag}});
	const oldPids = app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
	writeFileSync(flag, 'bad deploy');
	app.kill('SIGHUP');
	const failed = await app.waitForLog('reload failed: a new worker did not start or was not ready in time; the old workers keep serving');
	t.regex(JSON.stringify(failed['stderr']), /bad deploy, refusing to start/);
	t.is(failed['replaced'], 0);
	const answered = new Set<number>();
	for (let i = 0; i < 20; i++) {
		answered.add(Number((await client(url(app.port, '/pid'))).body));
	}

	t.true([...answered].every(pid => oldPids.includes(pid)));
	t.falsy(app.lines.find(line => line.msg === 'restarting worker'), 'a failed candidate is not restarted');
	rmSync(flag);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('SIGHUP during a drain is ignored', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms'], fixture('app.mjs'));
	app.kill('SIGTERM');
	await app.waitForLog('drain started');
	app.kill('SIGHUP');
	await app.waitForLog('SIGHUP ignored: the cluster is shutting down');
	t.is((await app.exited).code, 0, app.text());
	t.falsy(app.lines.find(line => line.msg === 'reload started'));
});

test('SIGTERM during a reload drains everything that runs, old and new workers', async t => {
	// A reject phase long enough for the slow-starting candidate to attach during it.
	const app = await startCluster(t, ['--reject-period', '3s'], fixture('app.mjs'), {env: {FIXTURE_LISTEN_DELAY_MS: '800'}});
	app.kill('SIGHUP');
	await app.waitForLog(line => line.msg === 'worker started' && line['workerRole'] === 'candidate');
	app.kill('SIGTERM');
	const exit = await app.exitWithin(40_000);
	t.is(exit?.code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain started'), {workers: 3}, 'the drain covers the old workers and the candidate');
	t.truthy(app.lines.find(line => line.msg === 'worker exited' && line['workerRole'] === 'candidate'));
	t.is(app.lines.filter(line => line.msg === 'worker drained').length, 3, 'the candidate drained too');
	t.like(app.lines.find(line => line.msg === 'worker exited' && line['workerRole'] === 'candidate'), {state: 'drained', code: 0});
	t.falsy(app.lines.find(line => line.msg === 'reload finished'));
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean'});
});

test('SIGTERM while a retired worker still serves: drain finished counts only what completed after the signal; what it served for the reload is in its own line', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
	// Both in flight on the old worker: one ends as it retires (its onDrain), one after the SIGTERM.
	const duringReload = client(url(app.port, '/on-drain'));
	const acrossSignal = client(url(app.port, '/slow?ms=8000'));
	await app.waitForLog('fixture request started', {count: 2});
	app.kill('SIGHUP');
	t.is((await duringReload).statusCode, 200);
	app.kill('SIGTERM');
	t.is((await acrossSignal).statusCode, 200);
	const exit = await app.exitWithin(30_000);
	t.is(exit?.code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain started'), {workers: 2});
	t.like(app.lines.find(line => line.role === 'worker' && line.msg?.startsWith('drain signal while retiring') === true), {served: 1, inflight: 1});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {served: 1, aborted: 0, rejected: 0, outcome: 'clean'}, 'the response the reload served is not the drain\'s');
});

test('an old worker that crashes while its replacement starts: the replacement takes the slot, no extra worker', async t => {
	const port = await freePort();
	const app = await startCluster(t, ['--reject-period', '300ms', '--restart-delay', '10ms'], fixture('app.mjs'), {workers: 1, env: {PORT: String(port), FIXTURE_LISTEN_DELAY_MS: '800'}});
	app.kill('SIGHUP');
	await app.waitForLog(line => line.msg === 'worker started' && line['workerRole'] === 'candidate');
	void client(url(port, '/crash')).catch(() => undefined);
	await app.waitForLog('not restarting: a replacement for this slot is starting');
	t.like(await app.waitForLog('reload finished'), {replaced: 1});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain started'), {workers: 1});
	t.falsy(app.lines.find(line => line.msg === 'restarting worker'));
});
