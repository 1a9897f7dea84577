/**
 * A worker's own JSON log lines, found in its output where the app left a line
 * unfinished: `progress: 50%` with no newline, then our `drain started`, make
 * one line no log shipper parses. Only the primary sees every byte the app
 * writes there (fs.writeSync(1) and child processes included), so the primary
 * takes our line back out (output.ts).
 *
 * Every line of ours starts
 * `{"level":"<name>","time":<ms>,"role":"worker","pid":<this worker's pid>,`:
 * the pid sets it apart from the app's own JSON logs.
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
	 * The first of this worker's lines in `complete` (whole lines) that does not
	 * start a line of its own; `afterPiece`: a piece of the app's overlong line
	 * is out already (output.ts), so `complete`'s first byte does not start one.
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
