// Median and spread of a set of samples; formatting for the table.
export function summary(values) {
	const sorted = values.filter(v => Number.isFinite(v)).sort((a, b) => a - b);
	if (sorted.length === 0) {
		return {median: Number.NaN, min: Number.NaN, max: Number.NaN, n: 0};
	}

	const mid = Math.floor(sorted.length / 2);
	const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
	return {median, min: sorted[0], max: sorted.at(-1), n: sorted.length};
}

export function percentile(sortedValues, p) {
	if (sortedValues.length === 0) {
		return Number.NaN;
	}

	const index = Math.min(sortedValues.length - 1, Math.ceil((p / 100) * sortedValues.length) - 1);
	return sortedValues[Math.max(0, index)];
}

const digits = (value, decimals) => Number.isFinite(value) ? value.toFixed(decimals) : 'n/a';

/** "1.01x (0.99-1.03)" */
export function fmt(s, {decimals = 2, unit = ''} = {}) {
	return `${digits(s.median, decimals)}${unit} (${digits(s.min, decimals)}-${digits(s.max, decimals)})`;
}
