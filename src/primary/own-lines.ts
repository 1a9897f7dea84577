/**
 * A worker's own JSON log lines, found in its output where the app left a line
 * unfinished.
 *
 * The app and graceful-cluster's logger share the worker's stdout: an app that
 * writes `progress: 50%` with no newline, and then our drain's `drain started`,
 * makes one line of the two, `progress: 50%{"level":"info",...}`, which no log
 * shipper parses. Only the primary sees every byte the app writes there
 * (console.log, process.stdout.write, fs.writeSync(1), a child process it
 * started), so it is the primary that takes our line back out (output.ts). The
 * worker could end the app's line before its own only by watching the app's
 * writes: a wrapper on process.stdout.write, work on every write the app makes,
 * that would still miss fs.writeSync(1) and the app's child processes.
 *
 * Our lines are told apart by what every one of them carries, the logger's
 * (logger.ts) and the stack-capture thread's (worker/watchdog-thread.ts):
 * `{"level":"<name>","time":<ms>,"role":"worker","pid":<this worker's pid>,`.
 * The pid makes it this worker's own line, and nothing the app is likely to
 * print: the app's own JSON logs, even with the same field names, are left as
 * they are.
 */

const NEWLINE = 0x0A;
/** What comes before the marker in each of our lines: their start. */
const LINE_START = /\{"level":"[a-z]+","time":\d+,"role":"$/;
/** Long enough for LINE_START (about 50 bytes), read before each match. */
const LOOK_BACK = 80;

/** Where one of our lines is: `start` its `{`, `end` just past its newline. */
export interface OwnLine {
	readonly start: number;
	readonly end: number;
}

export class OwnLines {
	private readonly marker: Buffer;

	constructor(workerPid: number) {
		// Searched for in every chunk: it starts with a letter that is rare in
		// output, not with a quote or a comma (JSON is full of them), so the search
		// mostly skips through the bytes (64 KiB of JSON lines: 0.5 µs, not 10).
		this.marker = Buffer.from(`worker","pid":${workerPid},`);
	}

	/**
	 * The first of this worker's lines in `complete` (whole lines: it ends with
	 * a newline, and starts a line) that does not start a line of its own, or
	 * undefined; `afterPiece`: a piece of the app's overlong line is out already
	 * (output.ts), so even `complete`'s first byte is not the start of a line.
	 * One search for the marker over the bytes; a match costs a few more byte
	 * reads only where one of our lines is.
	 */
	gluedIn(complete: Buffer, afterPiece = false): OwnLine | undefined {
		for (let at = complete.indexOf(this.marker); at !== -1; at = complete.indexOf(this.marker, at + this.marker.length)) {
			const before = complete.subarray(Math.max(0, at - LOOK_BACK), at).toString('latin1');
			const found = LINE_START.exec(before);
			if (found === null) {
				continue;
			}

			const start = at - found[0].length;
			if (start > 0 ? complete[start - 1] !== NEWLINE : afterPiece) {
				const end = complete.indexOf(NEWLINE, at) + 1;
				// Ours is one whole JSON object: the app's own JSON that holds an object
				// shaped like ours (`{"audit":{"level":...,"pid":<this pid>,...}}`) is not.
				if (isJsonObject(complete.subarray(start, end))) {
					return {start, end};
				}
			}
		}

		return undefined;
	}
}

function isJsonObject(line: Buffer): boolean {
	try {
		return typeof JSON.parse(line.toString('utf8')) === 'object';
	} catch {
		return false;
	}
}
