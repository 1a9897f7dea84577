// Where a stop signal goes at the edges of a process's life (issue 40):
//
//   copies:  Ctrl-C to a process group with npm in front: how far behind the
//            terminal's copy npm's forwarded one arrives, as the app times them
//            (the gap DUPLICATE_SIGNAL_MS in src/timeline.ts must cover), with
//            npm's default script shell (sh) and with bash, idle and with
//            four busy loops on the machine
//   pid1:    graceful-cluster as PID 1 of a PID namespace (`unshare -fp`, as in
//            a container), SIGTERM sent D ms after the start: dropped (the
//            process serves on), ended at once, or drained; without an init,
//            and with tini in front (`docker run --init`, or tini in the image)
//
//   node bench/signals.js [--runs 20] [--only copies|pid1]
//
// pid1 needs root, unshare and tini (apt-get install tini); it is skipped
// without them. Run after `npm run build`.
import {spawn, spawnSync} from 'node:child_process';
import {mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';
import {setTimeout as sleep} from 'node:timers/promises';
import {fileURLToPath} from 'node:url';
import {parseArgs} from 'node:util';

const {values} = parseArgs({options: {runs: {type: 'string', default: '20'}, only: {type: 'string'}}});
const runs = Number(values.runs);
const root = path.resolve(fileURLToPath(import.meta.url), '../..');

async function waitFor(read, test, ms) {
	for (const end = Date.now() + ms; Date.now() < end; await sleep(5)) {
		if (test(read())) {
			return true;
		}
	}

	return false;
}

/** One Ctrl-C to the group of `npm run start`: the app's arrivals, in ms after the first. */
async function npmCopies(shell) {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-signals-'));
	writeFileSync(path.join(dir, 'app.cjs'), `let first; const gaps = [];
const on = () => { const now = performance.now(); first ??= now; gaps.push(now - first); };
process.on('SIGINT', on); console.log('ready');
setTimeout(() => { console.log('gaps ' + JSON.stringify(gaps)); process.exit(0); }, 600);\n`);
	writeFileSync(path.join(dir, 'package.json'), JSON.stringify({name: 'app', version: '1.0.0', scripts: {start: 'node app.cjs'}}));
	const gaps = [];
	for (let run = 0; run < runs; run++) {
		let out = '';
		const child = spawn('npm', ['--script-shell', shell, 'start'], {cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'ignore']});
		child.stdout.on('data', chunk => {
			out += chunk;
		});
		await waitFor(() => out, text => text.includes('ready'), 10_000);
		process.kill(-child.pid, 'SIGINT');
		await waitFor(() => out, text => text.includes('gaps '), 5000);
		const line = out.split('\n').find(text => text.startsWith('gaps '));
		gaps.push(line ? JSON.parse(line.slice(5)) : []);
		try {
			process.kill(-child.pid, 'SIGKILL');
		} catch {}
	}

	rmSync(dir, {recursive: true, force: true});
	return gaps;
}

function describe(gaps) {
	const seconds = gaps.filter(list => list.length > 1).map(list => list[1]);
	const max = seconds.length > 0 ? Math.max(...seconds).toFixed(2) : '-';
	return `${seconds.length} of ${gaps.length} runs saw npm's copy; the latest ${max} ms after the first`;
}

async function copies() {
	console.log('## npm\'s forwarded Ctrl-C\n');
	console.log('| script shell | load | what the app received |');
	console.log('| --- | --- | --- |');
	for (const load of ['idle', 'four busy loops']) {
		const busy = load === 'idle' ? [] : Array.from({length: 4}, () => spawn(process.execPath, ['-e', 'for(;;){}'], {stdio: 'ignore'}));
		for (const shell of ['sh', 'bash']) {
			console.log(`| ${shell} | ${load} | ${describe(await npmCopies(shell))} |`);
		}

		for (const child of busy) {
			child.kill('SIGKILL');
		}
	}
}

/** SIGTERM to PID 1 of a new PID namespace `delayMs` after its start. */
async function pid1Run(prefix, delayMs) {
	let log = '';
	const child = spawn('unshare', ['-fp', '--mount-proc', ...prefix, process.execPath, path.join(root, 'dist/bundle/cli.cjs'), '--workers', '1', path.join(root, 'bench/servers/hello.mjs')], {detached: true, stdio: ['ignore', 'pipe', 'ignore'], env: {...process.env, PORT: '0'}});
	child.stdout.on('data', chunk => {
		log += chunk;
	});
	// unshare forks: its child is PID 1 inside.
	let inner;
	await waitFor(() => spawnSync('pgrep', ['-P', String(child.pid)], {encoding: 'utf8'}).stdout.trim(), pid => {
		inner = Number(pid.split('\n')[0]);
		return inner > 0;
	}, 5000);
	await sleep(delayMs);
	process.kill(inner, 'SIGTERM');
	const alive = () => spawnSync('kill', ['-0', String(inner)]).status === 0;
	let result = 'dropped';
	await waitFor(() => 0, () => {
		if (!alive()) {
			result = 'ended at once';
			return true;
		}

		if (log.includes('drain started')) {
			result = 'drained';
			return true;
		}

		return false;
	}, 2000);
	try {
		process.kill(-child.pid, 'SIGKILL');
	} catch {}

	spawnSync('kill', ['-KILL', String(inner)]);
	return result;
}

async function pid1() {
	const missing = ['unshare', 'tini', 'pgrep'].filter(tool => spawnSync('which', [tool]).status !== 0);
	if (process.getuid?.() !== 0 || missing.length > 0) {
		console.log(`pid1: skipped (needs root and ${missing.join(', ') || 'nothing else'})`);
		return;
	}

	const delays = [0, 10, 20, 30, 40, 50, 60, 80, 100, 150];
	console.log('\n## SIGTERM to PID 1, D ms after the start\n');
	console.log(`| in front | ${delays.map(delay => `${delay} ms`).join(' | ')} |`);
	console.log(`| --- | ${delays.map(() => '---').join(' | ')} |`);
	for (const [name, prefix] of [['nothing (graceful-cluster is PID 1)', []], ['tini', ['tini', '--']]]) {
		const cells = [];
		for (const delay of delays) {
			const results = [];
			for (let run = 0; run < Math.max(1, Math.round(runs / 4)); run++) {
				results.push(await pid1Run(prefix, delay));
			}

			const counts = new Map();
			for (const result of results) {
				counts.set(result, (counts.get(result) ?? 0) + 1);
			}

			cells.push([...counts].map(([result, count]) => `${result} ${count}`).join(', '));
		}

		console.log(`| ${name} | ${cells.join(' | ')} |`);
	}
}

if (values.only !== 'pid1') {
	await copies();
}

if (values.only !== 'copies') {
	await pid1();
}
