// The benchmark's table: one row per figure (what, beside which baseline, the
// measured median and spread, the goal, the verdict) and notes under it. The
// figures (perf.js, hot-path.js) add rows; perf.js prints the table.
import process from 'node:process';
import {summary} from './stats.js';

// A round in which other processes (a shared machine: other people's builds and
// tests) used more than this many cores during any of its runs is left out of a
// load figure, as long as at least MIN_ROUNDS remain.
const FOREIGN_MAX = 0.15;
const MIN_ROUNDS = 3;

export const log = text => process.stderr.write(`${text}\n`);
export const verdict = ok => ok ? 'met' : 'NOT met';

export function createReport() {
	const rows = [];
	const notes = [];
	const tables = [];
	return {
		rows,
		notes,
		/** A figure's own markdown table (a time series, a breakdown), printed under the notes. */
		table(text) {
			tables.push(text);
		},
		row(figure, baseline, measured, goal, verdictText) {
			rows.push({figure, baseline, measured, goal, verdict: verdictText});
			log(`  -> ${figure}: ${measured} [${verdictText}]`);
		},
		note(text) {
			notes.push(text);
		},
		/** The rounds to use: those without foreign load (`round.foreign`, in cores), unless too few are left. */
		quiet(rounds, label) {
			const kept = rounds.filter(round => round.foreign <= FOREIGN_MAX);
			const used = kept.length >= MIN_ROUNDS ? kept : rounds;
			notes.push(`${label}: ${used.length} of ${rounds.length} rounds used${used === kept ? ` (left out: rounds where other processes used more than ${FOREIGN_MAX} of a core)` : ` (all: fewer than ${MIN_ROUNDS} rounds were free of other processes' load)`}; median foreign load ${summary(rounds.map(round => round.foreign)).median.toFixed(2)} cores.`);
			return used;
		},
		markdown() {
			const lines = [
				'| figure | baseline measured beside it | measured: median (min-max) | goal | verdict |',
				'| --- | --- | --- | --- | --- |',
				...rows.map(r => `| ${r.figure} | ${r.baseline} | ${r.measured} | ${r.goal} | ${r.verdict} |`),
			];
			if (notes.length > 0) {
				lines.push('', ...notes.map(note => `- ${note}`));
			}

			for (const table of tables) {
				lines.push('', table);
			}

			return lines.join('\n');
		},
	};
}
