// Signals from every side: straight to a worker, to the whole process group, twice.
import test from 'ava';
import {fixture, isAlive, startCluster} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

const url = (port: number, path: string) => `http://127.0.0.1:${port}${path}`;

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
		// eslint-disable-next-line no-await-in-loop
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

test('the same signal delivered twice at once is one drain; a later second signal ends it with code 4', async t => {
	const app = await startCluster(t, ['--reject-period', '20s', '--grace-period', '60s'], fixture('app.mjs'));
	app.kill('SIGTERM');
	// The wrapper's forwarded copy lands right behind the terminal's. (Two identical
	// signals sent before the first is handled merge into one in the kernel, so the
	// copy is sent once the first is being handled.)
	await app.waitForLog(line => line.role === 'primary' && line.msg === 'drain started');
	app.kill('SIGINT');
	await app.waitForLog('repeated signal right after the first; ignoring it');
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
