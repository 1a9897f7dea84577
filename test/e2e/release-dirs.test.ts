// Release directories (issue 18): `current -> releases/<name>`, flipped at deploy,
// then SIGHUP. The new workers must load the release the link names now: its
// script, its own node_modules, and (started from the link) its files read
// relative to the working directory.
import test, {type ExecutionContext} from 'ava';
import {cpSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {freePort, url} from '../../testkit/net.js';
import {waitUntil} from '../../testkit/proc.js';
import {ROOT, start, type Proc} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';

// The same script in every release: what differs is the package in its own
// node_modules and the config.json found through the working directory.
const SERVER = `import {readFileSync} from 'node:fs';
import http from 'node:http';
import {attach} from 'graceful-cluster/worker';
import release from 'release-name';

let cwdFile;
try {
	cwdFile = JSON.parse(readFileSync('config.json', 'utf8')).release;
} catch (error) {
	cwdFile = error.code;
}

const server = http.createServer((request, response) => {
	response.setHeader('content-type', 'application/json');
	response.end(JSON.stringify({release, cwdFile, pid: process.pid}));
});
attach(server);
server.listen(0);
`;

interface Answer {
	readonly release: string;
	readonly cwdFile: string;
	readonly pid: number;
}

/** A deploy root with releases/a and releases/b, `current -> releases/a`; removed in teardown. */
function deployRoot(t: ExecutionContext, {copyHelper = false} = {}): {root: string; current: string; flip(to: string): void} {
	const root = mkdtempSync(path.join(os.tmpdir(), 'gc-releases-'));
	t.teardown(() => {
		rmSync(root, {recursive: true, force: true});
	});
	for (const name of ['a', 'b']) {
		const release = path.join(root, 'releases', name);
		const modules = path.join(release, 'node_modules');
		mkdirSync(path.join(modules, 'release-name'), {recursive: true});
		writeFileSync(path.join(release, 'server.mjs'), SERVER);
		writeFileSync(path.join(release, 'config.json'), JSON.stringify({release: name}));
		writeFileSync(path.join(modules, 'release-name', 'package.json'), JSON.stringify({name: 'release-name', type: 'module', main: 'index.js'}));
		writeFileSync(path.join(modules, 'release-name', 'index.js'), `export default ${JSON.stringify(name)};\n`);
		// Each release's own copy of the helper, as an `npm ci` in it would give:
		// a link to this package, or, to be deleted with the release, what the package runs.
		if (copyHelper) {
			for (const part of ['package.json', 'dist/bundle']) {
				cpSync(path.join(ROOT, part), path.join(modules, 'graceful-cluster', part), {recursive: true});
			}
		} else {
			symlinkSync(ROOT, path.join(modules, 'graceful-cluster'), 'dir');
		}
	}

	const current = path.join(root, 'current');
	symlinkSync(path.join('releases', 'a'), current);
	return {
		root,
		current,
		// Atomic, as deploy tools do it: a new link renamed over the old one.
		flip(to) {
			const next = `${current}.tmp`;
			symlinkSync(path.join('releases', to), next);
			renameSync(next, current);
		},
	};
}

/** Several answers, each on a new connection, so round-robin spreads them over the workers. */
async function answers(port: number, count = 8): Promise<Answer[]> {
	const results: Answer[] = [];
	for (let i = 0; i < count; i++) {
		results.push(JSON.parse((await client(url(port, '/'))).body) as Answer);
	}

	return results;
}

function listeningPids(app: Proc): number[] {
	return app.lines.filter(line => line.msg === 'worker listening').map(line => Number(line['workerPid']));
}

/** SIGHUP, then wait until the old workers are gone, so only the new ones answer. */
async function reload(app: Proc, nth: number): Promise<void> {
	app.kill('SIGHUP');
	await app.waitForLog('reload finished', {count: nth});
	await app.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {count: 2 * nth});
}

async function started(app: Proc): Promise<number> {
	const line = await app.waitForLog('worker listening', {count: 2});
	return Number(String(line['address']).split(':').pop());
}

const OPTIONS = ['-w', '2', '--reject-period', '300ms', '--grace-period', '5s'];

test('started from the link (cd current, ./server.mjs), each reload loads the release the link names, its node_modules and its working directory', async t => {
	const {current, flip} = deployRoot(t);
	// As a shell started it: the kernel's cwd is releases/a, PWD the path through the link.
	const app = start(t, [...OPTIONS, './server.mjs'], {cwd: current, env: {PWD: current}});
	const port = await started(app);
	t.like(app.lines.find(line => line.msg === 'starting workers'), {script: path.join(current, 'server.mjs'), cwd: current}, 'the paths as given, through the link');

	const check = async (release: string, message: string): Promise<void> => {
		const got = await answers(port);
		t.deepEqual(got.map(({release, cwdFile}) => ({release, cwdFile})), got.map(() => ({release, cwdFile: release})), message);
		const pids = new Set(listeningPids(app).slice(-2));
		t.true(got.every(({pid}) => pids.has(pid)), 'only the newest workers answer');
	};

	await check('a', 'release a at start');
	flip('b');
	await reload(app, 1);
	await check('b', 'after the flip and a reload, every answer is from release b');
	flip('a');
	await reload(app, 2);
	await check('a', 'flipped back, release a again');

	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('an absolute script path through the link, from an unrelated directory: the script and its node_modules follow the link, the working directory stays', async t => {
	const {root, current, flip} = deployRoot(t);
	writeFileSync(path.join(root, 'config.json'), JSON.stringify({release: 'unrelated'}));
	// No PWD for this directory: the one inherited from the test runner names another, and is ignored.
	const app = start(t, [...OPTIONS, path.join(current, 'server.mjs')], {cwd: root});
	const port = await started(app);

	t.true((await answers(port)).every(answer => answer.release === 'a' && answer.cwdFile === 'unrelated'));
	flip('b');
	await reload(app, 1);
	t.deepEqual(new Set((await answers(port)).map(({release, cwdFile}) => `${release} ${cwdFile}`)), new Set(['b unrelated']));

	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('no PWD (systemd\'s WorkingDirectory=): an absolute script through the link still follows it, even once the release the cluster started in is deleted', async t => {
	const {root, current, flip} = deployRoot(t);
	// The kernel's cwd is releases/a; the test runner's PWD names another directory, as an unset one would.
	const app = start(t, [...OPTIONS, path.join(current, 'server.mjs')], {cwd: current});
	const port = await started(app);
	const first = realpathSync(path.join(root, 'releases', 'a'));
	t.like(app.lines.find(line => line.msg === 'starting workers'), {cwd: first}, 'the directory as the kernel names it');
	t.true((await answers(port)).every(answer => answer.release === 'a' && answer.cwdFile === 'a'));

	flip('b');
	rmSync(first, {recursive: true}); // the deploy tool cleans up old releases
	await reload(app, 1);
	// Workers inherit the primary's directory, deleted: their relative reads fail, the script and its modules do not.
	t.deepEqual(new Set((await answers(port)).map(({release, cwdFile}) => `${release} ${cwdFile}`)), new Set(['b ENOENT']));

	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('the release a worker started from is deleted, helper and all, before the worker logged a line: its drain still logs, from code it read at start', async t => {
	const {root, current} = deployRoot(t, {copyHelper: true});
	const metricsPort = await freePort();
	const app = start(t, [...OPTIONS, '--metrics', `127.0.0.1:${metricsPort}`, path.join(current, 'server.mjs')], {cwd: root});
	await started(app);
	t.falsy(app.lines.find(line => line.role === 'worker'), 'no worker has logged yet');
	// By its first heartbeat, a second in, a worker has read everything it may
	// need later.
	await waitUntil(async () => {
		const status = JSON.parse((await client(url(metricsPort, '/status'))).body) as {workers: Array<{rssBytes: number | null}>};
		return status.workers.length === 2 && status.workers.every(worker => worker.rssBytes !== null);
	}, {timeout: 10_000, what: 'a heartbeat from each worker'});

	rmSync(path.join(root, 'releases', 'a'), {recursive: true}); // the deploy tool cleans up old releases
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
	t.is(app.lines.filter(line => line.role === 'worker' && line.msg === 'worker drained').length, 2, app.text());
	t.falsy(app.lines.find(line => line.level === 'error' || line.level === 'fatal'), app.text());
});
