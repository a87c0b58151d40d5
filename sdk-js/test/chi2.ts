// The chi-square upper tail: Q(k/2, x/2), the regularised upper incomplete gamma
// function (series below a + 1, Lentz's continued fraction above).

function lgamma(z: number): number {
  const c = [676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (z < 0.5) return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * z))) - lgamma(1 - z);
  z -= 1;
  let x = 0.99999999999980993;
  for (let i = 0; i < 8; i++) x += c[i] / (z + i + 1);
  const t = z + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(x);
}

function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const front = Math.exp(-x + a * Math.log(x) - lgamma(a));
  if (x < a + 1) {
    let sum = 1 / a, term = sum;
    for (let n = 1; n < 10000; n++) { term *= x / (a + n); sum += term; if (term < sum * 1e-16) break; }
    return 1 - sum * front;
  }
  const tiny = 1e-300;
  let b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (let i = 1; i < 10000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b; if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c; if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) break;
  }
  return front * h;
}

/** P[chi2(df) > x]. */
export function chi2Tail(x: number, df: number): number {
  return gammaQ(df / 2, x / 2);
}

/** Pearson's statistic of observed counts against expected probabilities (sum 1). */
export function chi2Stat(counts: ArrayLike<number>, probs: ArrayLike<number>, n: number): number {
  let s = 0;
  for (let i = 0; i < counts.length; i++) {
    const e = n * probs[i];
    s += (counts[i] - e) ** 2 / e;
  }
  return s;
}
