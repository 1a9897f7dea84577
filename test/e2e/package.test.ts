// The package as a user installs it: packed, installed into a fresh app, run through
// its bin, loaded by ES module and CommonJS apps through `graceful-cluster/worker`.
import test from 'ava';
import {execFileSync} from 'node:child_process';
import {mkdtempSync, readFileSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {url} from '../../testkit/net.js';
import {ROOT, start} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

const app = mkdtempSync(path.join(os.tmpdir(), 'gc-user-app-'));

test.before(() => {
	const npm = (args: string[], cwd: string) => execFileSync('npm', args, {cwd, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8'});
	const tarball = npm(['pack', '--silent', '--ignore-scripts', '--pack-destination', app], ROOT).trim().split('\n').pop()!;
	// A version of its own: `--version` must not print it (yargs reads the nearest package.json).
	writeFileSync(path.join(app, 'package.json'), JSON.stringify({name: 'user-app', version: '7.7.7', private: true}));
	npm(['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(app, tarball)], app);
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
	rmSync(app, {recursive: true, force: true});
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
