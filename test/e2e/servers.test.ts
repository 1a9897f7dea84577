// Apps with more than one server: every address is logged, and one that no
// attach() covers is named at start, because its requests are cut at exit.
import test from 'ava';
import {freePort} from '../../testkit/net.js';
import {fixture, start} from '../helpers/cluster.js';

const WARNING = 'a server listens on an address that no attach() covers: its requests in flight are cut when the worker exits. Call attach(server) for it too';

test('a second server the app did not attach: "worker listening" for both addresses, one warning naming the uncovered one', async t => {
	const adminPort = await freePort();
	const app = start(t, ['-w', '2', '--reject-period', '200ms', fixture('two-servers.mjs')], {env: {ADMIN_PORT: String(adminPort)}});
	const warning = await app.waitForLog(WARNING);
	t.is(warning['address'], `*:${adminPort}`);
	t.is(warning['level'], 'warn');
	const addresses = app.lines.filter(line => line.msg === 'worker listening').map(line => String(line['address']));
	t.is(addresses.length, 4, 'two addresses per worker');
	t.is(addresses.filter(address => address === `*:${adminPort}`).length, 2);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.msg === WARNING).length, 1, 'once per address, not per worker');
});

test('both servers attached: no warning', async t => {
	const app = start(t, ['-w', '1', '--log-level', 'debug', '--reject-period', '200ms', fixture('two-servers.mjs')], {env: {ADMIN_ATTACH: '1'}});
	await app.waitForLog('worker listening', {count: 2});
	// The check, a second after the worker listens.
	await app.waitForLog('every address of the worker is attached');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.falsy(app.lines.find(line => line.msg === WARNING));
});
