// The package as a user installs it: packed, installed into a fresh app, run through
// its bin, loaded by ES module and CommonJS apps through `graceful-cluster/worker`;
// and what the tarball holds.
import test from 'ava';
import {execFileSync} from 'node:child_process';
import {existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync} from 'node:fs';
import path from 'node:path';
import {url} from '../../testkit/net.js';
import {ROOT, start} from '../helpers/cluster.js';
import {relativeLinks} from '../helpers/docs.js';
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

/** The files package.json points at: bin, exports (every condition), types, typesVersions. */
function manifestTargets(): string[] {
	const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Record<string, unknown>;
	const leaves = (value: unknown): string[] => (typeof value === 'string' ? [value] : Object.values(value as object).flatMap(leaves));
	return [manifest['bin'], manifest['exports'], manifest['types'], manifest['typesVersions']].flatMap(leaves).map(target => path.posix.normalize(target));
}

/** The declarations package.json names and every declaration those import, as in the build's dist/. */
function declarationsNeeded(): Set<string> {
	const pending = manifestTargets().filter(file => /\.d\.c?ts$/.test(file));
	const needed = new Set<string>();
	for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
		if (needed.has(file)) {
			continue;
		}

		needed.add(file);
		if (existsSync(path.join(ROOT, file))) {
			const text = readFileSync(path.join(ROOT, file), 'utf8');
			for (const [, specifier] of text.matchAll(/(?:from|import\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
				pending.push(path.posix.join(path.posix.dirname(file), specifier!).replace(/\.js$/, '.d.ts').replace(/\.cjs$/, '.d.cts'));
			}
		}
	}

	return needed;
}

/** The files git tracks under `folder`, as paths from the root. */
const gitFiles = (folder: string): string[] => execFileSync('git', ['ls-files', folder], {cwd: ROOT, encoding: 'utf8'}).split('\n').filter(line => line !== '');

test('the tarball holds what an installed package loads, each once, and nothing else: LICENSE, README.md, package.json, docs/ and the examples it links to, the bundle and the declarations its types need', t => {
	const files = packedFiles();
	const packed = new Set(files);
	t.is(packed.size, files.length, 'no path twice');
	for (const name of ['LICENSE', 'README.md', 'package.json']) {
		t.true(packed.has(name), name);
	}

	// What package.json names (bin, exports, types) is there.
	for (const file of manifestTargets()) {
		t.true(packed.has(file), `${file}, named by package.json`);
	}

	// The declarations: exactly those package.json names and those they import.
	const declarations = declarationsNeeded();
	t.true(declarations.has('dist/types/worker/index.d.cts'));
	t.deepEqual(files.filter(file => /\.d\.[cm]?ts$/.test(file)).sort(), [...declarations].sort(), 'the packed declarations are those the types entries reach');

	// The bundle: its code files are those its file list names (the primary and the
	// helper check them at start, install-check.ts), and beside them the list itself and
	// the prebuilt --help (print-only.ts: without it, every --help loads yargs).
	const {files: listed} = JSON.parse(readFileSync(path.join(ROOT, 'dist/bundle/graceful-cluster-files.json'), 'utf8')) as {files: Record<string, number>};
	t.deepEqual(
		files.filter(file => file.startsWith('dist/bundle/')).sort(),
		[...Object.keys(listed).map(file => `dist/bundle/${file}`), 'dist/bundle/graceful-cluster-files.json', 'dist/bundle/help.txt'].sort(),
	);
	for (const file of ['dist/bundle/cli.cjs', 'dist/bundle/main.cjs', 'dist/bundle/worker/bootstrap.cjs', 'dist/bundle/worker/watchdog-thread.js', 'dist/bundle/worker/index.cjs']) {
		t.true(packed.has(file), file);
	}

	t.deepEqual(files.filter(file => file.endsWith('help.txt')), ['dist/bundle/help.txt'], 'the prebuilt --help once');

	// The docs README.md links to, all of them.
	const docs = readdirSync(path.join(ROOT, 'docs')).map(name => `docs/${name}`).sort();
	t.deepEqual(files.filter(file => file.startsWith('docs/')).sort(), docs);

	// The examples and the systemd unit the docs link to, all of them.
	t.deepEqual(files.filter(file => /^(examples|systemd)\//.test(file)).sort(), [...gitFiles('examples'), ...gitFiles('systemd')].sort());

	// Nothing else: not the compiled tree the tests import (dist/src/), not the sources,
	// tests, benches or build records, and no source map.
	t.deepEqual(files.filter(file => !['LICENSE', 'README.md', 'package.json'].includes(file) && !/^(dist\/bundle|dist\/types|docs|examples|systemd)\//.test(file)), []);
	t.deepEqual(files.filter(file => file.startsWith('dist/types/') && !declarations.has(file)), []);
	t.deepEqual(files.filter(file => file.endsWith('.map') || file.endsWith('.tsbuildinfo') || file.endsWith('.tgz')), []);
});

test('installed package: every relative link in its README.md and docs leads to a file (or a folder) the package holds', t => {
	const installed = path.join(app, 'node_modules/graceful-cluster');
	const pages = ['README.md', ...readdirSync(path.join(installed, 'docs')).map(name => `docs/${name}`)];
	let count = 0;
	for (const page of pages) {
		const links = relativeLinks(readFileSync(path.join(installed, page), 'utf8'))
			.map(link => decodeURIComponent(link.split('#')[0]!))
			.filter(link => link !== '');
		count += links.length;
		for (const link of links) {
			const target = path.resolve(path.dirname(path.join(installed, page)), link);
			t.true(target.startsWith(installed + path.sep) && existsSync(target) && (statSync(target).isFile() || link.endsWith('/')), `${page} links to ${link}, which the installed package does not hold`);
		}
	}

	t.true(count >= 50, `README.md and docs/ link to ${count} files`);
});
