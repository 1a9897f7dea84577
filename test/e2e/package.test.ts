// The package as a user installs it: packed, installed into a fresh app, run through
// its bin, loaded by ES module and CommonJS apps through `graceful-cluster/worker`.
import test from 'ava';
import {execFileSync} from 'node:child_process';
import {readFileSync, rmSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import {url} from '../../testkit/net.js';
import {ROOT, start} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';
import {installPacked} from '../helpers/package.js';

let app = '';

test.before(() => {
	// A version of its own: `--version` must not print it (yargs reads the nearest package.json).
	({dir: app} = installPacked('gc-user-app-', '7.7.7'));
	writeFileSync(path.join(app, 'server.mjs'), `
import http from 'node:http';
import {attach} from 'graceful-cluster/worker';
const server = http.createServer((request, response) => response.end('esm'));
attach(server).onShutdown(() => console.log(JSON.stringify({msg: 'user hook', kind: 'esm'})));
server.listen(0);
`);
	writeFileSync(path.join(app, 'server.cjs'), `
const http = require('node:http');
const {attach} = require('graceful-cluster/worker');
const server = http.createServer((request, response) => response.end('cjs'));
attach(server).onShutdown(() => console.log(JSON.stringify({msg: 'user hook', kind: 'cjs'})));
server.listen(0);
`);
});

test('installed package: --version prints graceful-cluster\'s own version, not the app\'s, from the app\'s directory', t => {
	const own = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {version: string}).version;
	const bin = path.join(app, 'node_modules/.bin/graceful-cluster');
	const printed = execFileSync(process.execPath, [bin, '--version'], {cwd: app, encoding: 'utf8'}).trim();
	t.is(printed, own);
	t.not(printed, '7.7.7');
});

test.after.always(() => {
	if (app !== '') {
		rmSync(app, {recursive: true, force: true});
	}
});

for (const kind of ['esm', 'cjs'] as const) {
	test.serial(`installed package: the bin runs a ${kind} app that imports graceful-cluster/worker, and drains it`, async t => {
		const bin = path.join(app, 'node_modules/.bin/graceful-cluster');
		const cluster = start(t, [bin, '-w', '1', '--reject-period', '300ms', `server.${kind === 'esm' ? 'mjs' : 'cjs'}`], {command: process.execPath, cwd: app});
		const listening = await cluster.waitForLog('worker listening');
		const port = Number(String(listening['address']).split(':').pop());
		t.is((await client(url(port, '/'))).body, kind);
		cluster.kill('SIGTERM');
		t.is((await cluster.exited).code, 0, cluster.text());
		t.like(cluster.lines.find(line => line.msg === 'user hook'), {kind});
	});
}

test('installed package: require() and import give the same exports, from one instance', t => {
	writeFileSync(path.join(app, 'exports.cjs'), `
const required = require('graceful-cluster/worker');
import('graceful-cluster/worker').then(imported => console.log(JSON.stringify({
	required: Object.keys(required).sort(),
	imported: Object.keys(imported).sort(),
	same: required.attach === imported.attach,
})));
`);
	const printed = JSON.parse(execFileSync(process.execPath, ['exports.cjs'], {cwd: app, encoding: 'utf8'})) as {required: string[]; imported: string[]; same: boolean};
	// The CommonJS entry (src/worker/index.cts) lists the ES module's value exports by hand.
	t.deepEqual(printed.required, printed.imported);
	t.true(printed.same);
});
