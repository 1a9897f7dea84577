// CommonJS apps, standalone mode (plain `node server.js`), and the app's own IPC traffic.
import {spawnSync} from 'node:child_process';
import test from 'ava';
import {url} from '../../testkit/net.js';
import {CLI, fixture, start, startCluster} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

test('a CommonJS app require()s the helper and drains the same way', async t => {
	const app = await startCluster(t, ['--reject-period', '800ms', '--grace-period', '10s'], fixture('app.cjs'));
	t.is((await client(url(app.port, '/'))).body, 'hello from commonjs');
	const slow = client(url(app.port, '/slow'));
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started', {count: 2});
	const rejected = await client(url(app.port, '/'));
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers['retry-after'], '1');
	t.is((await slow).body, 'slow done');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.msg === 'fixture shutdown hook').length, 2);
	t.false(app.text().includes('ExperimentalWarning'), 'require(esm) of the helper prints no warning');
});

test('standalone: under plain node the helper drains the process itself, on the GRACEFUL_CLUSTER_* timeline', async t => {
	const app = start(t, [fixture('app.mjs')], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: '3s', GRACEFUL_CLUSTER_GRACE_PERIOD: '10s', GRACEFUL_CLUSTER_RETRY_AFTER: '3'}});
	const {port} = await app.waitForLog('fixture listening') as {port: number};
	t.is((await client(url(port, '/readyz'))).statusCode, 200);
	const slow = client(url(port, '/slow?ms=4500'));
	await app.waitForLog('fixture request started');
	const signalledAt = app.kill('SIGTERM');
	await app.waitForLog('drain started');
	const rejected = await client(url(port, '/'));
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers['retry-after'], '3');
	t.is((await client(url(port, '/readyz'))).statusCode, 503);
	t.is((await client(url(port, '/livez'))).statusCode, 200);
	t.is((await slow).statusCode, 200);
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.true(exit.at - signalledAt >= 3000);
	t.truthy(app.lines.find(line => line.msg === 'fixture shutdown hook'));
	t.like(app.lines.find(line => line.msg === 'drain finished'), {role: 'standalone', outcome: 'clean', served: 1});
});

test('standalone: a second Ctrl-C exits at once with code 4; the deadline exits with code 3', async t => {
	const impatient = start(t, [fixture('app.mjs')], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: '20s'}});
	const listening = await impatient.waitForLog('fixture listening') as {port: number};
	// The copy a wrapper forwards right behind the terminal's (npm start + Ctrl-C) is
	// the same Ctrl-C. Sent back to back as two different signals, which the kernel
	// never merges into one (two copies of one pending signal it would).
	impatient.kill('SIGINT');
	impatient.kill('SIGTERM');
	const repeated = await impatient.waitForLog('repeated signal right after the first; ignoring it');
	const received = impatient.lines.filter(line => line.msg === 'signal received');
	t.is(received.length, 1);
	t.deepEqual([received[0]!['signal'], repeated['signal']].sort(), ['SIGINT', 'SIGTERM']);
	t.is(impatient.lines.filter(line => line.msg === 'drain started').length, 1, 'one drain');
	// A second later (the first per-second summary of rejections) it is a second Ctrl-C.
	t.is((await client(url(listening.port, '/'))).statusCode, 503);
	await impatient.waitForLog('rejected requests while draining');
	impatient.kill('SIGINT');
	t.is((await impatient.exited).code, 4);
	t.like(impatient.lines.find(line => line.msg === 'drain finished'), {outcome: 'forced', exitCode: 4, rejected: 1}, 'the summary is there too');

	const stuck = start(t, [fixture('app.mjs')], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: '200ms', GRACEFUL_CLUSTER_GRACE_PERIOD: '1s'}});
	const {port} = await stuck.waitForLog('fixture listening') as {port: number};
	void client(url(port, '/hang')).catch(() => undefined);
	await stuck.waitForLog('fixture request started');
	stuck.kill('SIGTERM');
	t.is((await stuck.exited).code, 3);
	t.like(stuck.lines.find(line => line.msg === 'drain finished'), {outcome: 'forced', inflight: 1});
});

test('standalone: a malformed GRACEFUL_CLUSTER_* value stops the app at start, naming the variable', async t => {
	const app = start(t, [fixture('app.mjs')], {plainNode: true, env: {GRACEFUL_CLUSTER_REJECT_PERIOD: 'a while'}});
	const exit = await app.exited;
	t.is(exit.code, 2, 'the usage code, as the CLI');
	t.regex(app.text(), /^graceful-cluster: --reject-period \(GRACEFUL_CLUSTER_REJECT_PERIOD\): "a while" is not a duration/m);
});

test('the app\'s own IPC messages, even ones shaped like ours, neither crash nor drain the primary', async t => {
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '10s'], fixture('app.mjs'), {env: {FIXTURE_APP_IPC: '1'}});
	await app.waitForLog('fixture sent app messages', {count: 2});
	const warnings = await app.waitForLog('ignored a malformed graceful-cluster message', {count: 3});
	t.is(warnings.level, 'warn');
	t.is((await client(url(app.port, '/'))).body, 'hello', 'still serving');
	t.falsy(app.lines.find(line => line.msg === 'drain started'), 'a foreign {type: "drain"} is not a drain');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	// The app's own message listener sees our drain message; documented in docs/app.md.
	t.like(app.lines.find(line => line.msg === 'fixture got message')?.['message'], {gracefulCluster: {v: 1, type: 'drain'}});
});

test('a worker\'s output that is not UTF-8 comes out byte for byte, in JSON and in pretty mode', t => {
	for (const format of ['json', 'pretty']) {
		const run = spawnSync(process.execPath, [CLI, '-w', '1', '--max-start-failures', '1', '--log-format', format, fixture('binary-output.mjs')], {timeout: 20_000});
		t.is(run.status, 6, `${format}: the app never listens, so the cluster gives up`);
		t.true(run.stdout.includes(Buffer.from([0xFF, 0xFE, 0x41, 0x0A])), `${format}: the bytes as the worker wrote them`);
		t.false(run.stdout.includes(Buffer.from('\uFFFD')), `${format}: no replacement character`);
	}
});
