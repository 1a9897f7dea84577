// The package as a user installs it: packed, installed into a fresh app, run through
// its bin, loaded by ES module and CommonJS apps through `graceful-cluster/worker`;
// and what the tarball holds.
import test from 'ava';
import {execFileSync} from 'node:child_process';
import {existsSync, readFileSync, readdirSync, rmSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import {url} from '../../testkit/net.js';
import {ROOT, start} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';
import {installPacked, packedFiles} from '../helpers/package.js';

let app = '';
let installWarnings = '';

test.before(() => {
	// A version of its own: `--version` must not print it (yargs reads the nearest package.json).
	({dir: app, installWarnings} = installPacked('gc-user-app-', '7.7.7'));
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

test.serial('installed package: an app bundled into one CommonJS file with the helper inlined (esbuild) starts, logs and drains (found by a hostile trial: "Invalid URL" at load)', async t => {
	// esbuild leaves `import.meta` empty in CommonJS output: the helper then has no
	// files of its own beside it to check.
	execFileSync(path.join(ROOT, 'node_modules/.bin/esbuild'), ['server.cjs', '--bundle', '--platform=node', '--format=cjs', '--log-level=error', '--outfile=bundled.cjs'], {cwd: app});
	t.true(readFileSync(path.join(app, 'bundled.cjs'), 'utf8').includes('function attach('), 'the helper is inlined');
	const bin = path.join(app, 'node_modules/.bin/graceful-cluster');
	const cluster = start(t, [bin, '-w', '1', '--reject-period', '300ms', 'bundled.cjs'], {command: process.execPath, cwd: app});
	const listening = await cluster.waitForLog('worker listening');
	t.is((await client(url(Number(String(listening['address']).split(':').pop()), '/'))).body, 'cjs');
	cluster.kill('SIGTERM');
	t.is((await cluster.exited).code, 0, cluster.text());
	t.truthy(cluster.lines.find(line => line.role === 'worker' && line.msg === 'drain started'), 'the worker\'s logger loaded');
	t.like(cluster.lines.find(line => line.msg === 'user hook'), {kind: 'cjs'});
});

test('installed package: npm installs the tarball without asking to review an install script', t => {
	// npm 11 counts a `prepare` script among the install scripts of a dependency that does
	// not come from a registry (a tarball, a git URL), and asks for a review, although it
	// never runs it for a tarball (@npmcli/arborist lib/install-scripts.js): the package has
	// no `prepare`, `prepack` builds it.
	t.notRegex(installWarnings, /install.scripts|allowScripts/i, installWarnings);
});

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

/** Every .ts/.cts file under `dir`, relative to ROOT. */
function sources(dir: string): string[] {
	return readdirSync(path.join(ROOT, dir), {recursive: true, encoding: 'utf8'})
		.filter(file => /\.c?ts$/.test(file) && !/\.d\.c?ts$/.test(file))
		.map(file => path.posix.join(dir, file.split(path.sep).join('/')));
}

/** The files package.json points at: bin, exports (every condition), types, typesVersions. */
function manifestTargets(): string[] {
	const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Record<string, unknown>;
	const leaves = (value: unknown): string[] => (typeof value === 'string' ? [value] : Object.values(value as object).flatMap(leaves));
	return [manifest['bin'], manifest['exports'], manifest['types'], manifest['typesVersions']].flatMap(leaves).map(target => path.posix.normalize(target));
}

test('the tarball holds LICENSE, README.md, package.json and src/ compiled with its declarations, and nothing of the tests or the sources', t => {
	const files = packedFiles();
	const packed = new Set(files);
	for (const name of ['LICENSE', 'README.md', 'package.json']) {
		t.true(packed.has(name), name);
	}
	for (const source of sources('src')) {
		const compiled = source.endsWith('.cts')
			? [source.replace(/\.cts$/, '.cjs'), source.replace(/\.cts$/, '.d.cts')]
			: [source.replace(/\.ts$/, '.js'), source.replace(/\.ts$/, '.d.ts')];
		for (const file of compiled) {
			t.true(packed.has(`dist/${file}`), `dist/${file}, from ${source}`);
		}
	}
	// What package.json names, and every declaration file those declarations import.
	const pending = manifestTargets();
	const seen = new Set<string>();
	for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
		if (seen.has(file)) {
			continue;
		}
		seen.add(file);
		t.true(packed.has(file), `${file}, named by package.json or imported by a declaration there`);
		if (/\.d\.c?ts$/.test(file) && existsSync(path.join(ROOT, file))) {
			const text = readFileSync(path.join(ROOT, file), 'utf8');
			for (const [, specifier] of text.matchAll(/(?:from|import\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
				pending.push(path.posix.join(path.posix.dirname(file), specifier!).replace(/\.js$/, '.d.ts').replace(/\.cjs$/, '.d.cts'));
			}
		}
	}
	t.true(seen.has('dist/src/worker/index.d.cts'));
	// The prebuilt --help (print-only.ts) beside the code that reads it: without it, every --help loads yargs.
	t.true(packed.has('dist/bundle/help.txt'));
	// The bundle's worker entries beside the bootstrap: the hung-stack thread, and the CommonJS hand-over.
	for (const file of ['dist/bundle/worker/bootstrap.cjs', 'dist/bundle/worker/watchdog-thread.js', 'dist/bundle/worker/index.cjs']) {
		t.true(packed.has(file), file);
	}
	// A source map is only worth shipping with the sources it points at; we ship neither.
	for (const map of files.filter(file => file.endsWith('.map'))) {
		const {sources: mapped} = JSON.parse(readFileSync(path.join(ROOT, map), 'utf8')) as {sources: string[]};
		for (const source of mapped) {
			t.true(packed.has(path.posix.join(path.posix.dirname(map), source)), `${map} points at ${source}`);
		}
	}
	t.deepEqual(files.filter(file => /^(src|test|testkit|dist\/test|dist\/testkit)\//.test(file) || file.endsWith('.tsbuildinfo')), []);
});
