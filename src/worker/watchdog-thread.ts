/**
 * The stack-capture thread (`--hung-stack on`). When the main loop's beat (a counter
 * in shared memory) has not moved for `captureAfterMs`, it attaches to the main
 * thread through the inspector, pauses it (V8 interrupts even a `while (true) {}`),
 * reads the call frames, resumes and disconnects (a session left connected holds the
 * exit with "Waiting for the debugger to disconnect"). It writes one JSON line with
 * `fs.writeSync`: the logger lives on the blocked main thread, and a thread cannot
 * `process.send`. One capture per blocked stretch.
 */
import {writeSync} from 'node:fs';
import inspector from 'node:inspector';
import {workerData} from 'node:worker_threads';
import {HUNG_STACK_MESSAGE} from '../protocol.js';

interface Data {
	readonly beat: Int32Array;
	readonly captureAfterMs: number;
	readonly workerId: number;
	readonly pid: number;
}

const POLL_MS = 250;
const MAX_FRAMES = 12;
/** The primary keeps 2000 characters of a stderr line. */
const MAX_LINE = 1900;

const {beat, captureAfterMs, workerId, pid} = workerData as Data;
let seen = Atomics.load(beat, 0);
let seenAt = Date.now();
let captured = false;

setInterval(() => {
	const now = Atomics.load(beat, 0);
	if (now !== seen) {
		seen = now;
		seenAt = Date.now();
		captured = false;
		return;
	}

	const blockedMs = Date.now() - seenAt;
	if (!captured && blockedMs >= captureAfterMs) {
		captured = true;
		capture(blockedMs);
	}
}, POLL_MS);

function capture(blockedMs: number): void {
	const startedAt = Date.now();
	const session = new inspector.Session();
	const urls = new Map<string, string>();
	try {
		session.connectToMainThread();
	} catch {
		return;
	}

	session.on('Debugger.scriptParsed', ({params}) => {
		urls.set(params.scriptId, params.url);
	});
	session.once('Debugger.paused', ({params}) => {
		const frames = params.callFrames.slice(0, MAX_FRAMES).map(frame => {
			const url = urls.get(frame.location.scriptId) ?? frame.url;
			return `${frame.functionName || '<anonymous>'} (${url}:${frame.location.lineNumber + 1}:${(frame.location.columnNumber ?? 0) + 1})`;
		});
		session.post('Debugger.resume', () => {
			session.disconnect();
			write(frames, blockedMs, Date.now() - startedAt);
		});
	});
	session.post('Debugger.enable', () => {
		session.post('Debugger.pause');
	});
}

function write(frames: string[], blockedMs: number, captureMs: number): void {
	const line = (stack: string[]): string => JSON.stringify({level: 'error', time: Date.now(), role: 'worker', pid, worker: workerId, blockedMs, captureMs, stack, msg: HUNG_STACK_MESSAGE});
	let text = line(frames);
	while (text.length > MAX_LINE && frames.length > 1) {
		frames = frames.slice(0, -1);
		text = line(frames);
	}

	try {
		writeSync(2, `${text}\n`);
	} catch {}
}
