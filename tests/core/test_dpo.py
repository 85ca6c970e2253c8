import jax
import numpy as np
import pytest

from rlvr_jax.core import dpo


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _np_loss_and_grads(c, r, rc, rr, valid, beta, eps, loss_type):
    """Loss sum and d(loss sum)/d(policy chosen, rejected) per pair, by hand."""
    total = 0.0
    gc = np.zeros(len(c))
    gr = np.zeros(len(c))
    for i in range(len(c)):
        if not valid[i]:
            continue
        d = (float(c[i]) - float(rc[i])) - (float(r[i]) - float(rr[i]))
        h = beta * d
        if loss_type == "sigmoid":
            total += -(1 - eps) * _log_sigmoid(h) - eps * _log_sigmoid(-h)
            sig = 1.0 / (1.0 + np.exp(-h))
            # d/dh [-(1-eps) log σ(h) - eps log σ(-h)] = -(1-eps)(1-σ) + eps σ
            dh = -(1 - eps) * (1 - sig) + eps * sig
            gc[i], gr[i] = dh * beta, -dh * beta
        else:
            total += (d - 1 / (2 * beta)) ** 2
            dd = 2 * (d - 1 / (2 * beta))
            gc[i], gr[i] = dd, -dd
    return total, gc, gr


@pytest.mark.parametrize("loss_type,eps", [("sigmoid", 0.0), ("sigmoid", 0.1), ("ipo", 0.0)])
@pytest.mark.parametrize("p", [1, 7])
def test_dpo_loss_and_gradient_match_numpy(loss_type, eps, p):
    rng = np.random.default_rng(p + int(eps * 10))
    c, r, rc, rr = (rng.normal(-20, 5, p).astype(np.float32) for _ in range(4))
    valid = rng.random(p) < 0.7
    valid[0] = True
    r[~valid] = np.nan  # padding may hold anything
    beta = 0.3

    def f(c_, r_):
        s, n, _ = dpo.dpo_loss(
            c_, r_, rc, rr, valid, beta=beta, label_smoothing=eps, loss_type=loss_type
        )
        return s, n

    s, n = f(c, r)
    grads = jax.grad(lambda a, b: f(a, b)[0], argnums=(0, 1))(c, r)
    want, wgc, wgr = _np_loss_and_grads(c, r, rc, rr, valid, beta, eps, loss_type)
    np.testing.assert_allclose(float(s), want, rtol=1e-5)
    assert float(n) == valid.sum()
    np.testing.assert_allclose(np.asarray(grads[0]), wgc, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(grads[1]), wgr, rtol=1e-5, atol=1e-7)
    # No gradient reaches the reference.
    g_ref = jax.grad(lambda a: dpo.dpo_loss(c, r, a, rr, valid, beta=beta, loss_type=loss_type)[0])(
        rc
    )
    assert not np.any(np.asarray(g_ref))


def test_dpo_hand_computed_and_stats():
    # Chosen gained 2 nats over the reference, rejected lost 1: h = β·3.
    s, n, st = dpo.dpo_loss(
        np.array([-8.0]), np.array([-11.0]), np.array([-10.0]), np.array([-10.0]), [True], beta=0.5
    )
    assert float(n) == 1
    np.testing.assert_allclose(float(s), np.log1p(np.exp(-1.5)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(st["margin"]), [1.5])
    np.testing.assert_allclose(np.asarray(st["reward_chosen"]), [1.0])
    np.testing.assert_allclose(np.asarray(st["reward_rejected"]), [-0.5])
    assert np.asarray(st["accuracy"]).tolist() == [1.0]
    # At the reference the loss is log 2 whatever β is.
    s, _, _ = dpo.dpo_loss([-3.0], [-4.0], [-3.0], [-4.0], [1], beta=7.0)
    np.testing.assert_allclose(float(s), np.log(2.0), rtol=1e-6)


def test_dpo_extreme_margins_stay_finite():
    s, _, _ = dpo.dpo_loss([-1e4], [0.0], [0.0], [0.0], [True], beta=1.0)
    assert np.isfinite(float(s)) and float(s) > 9e3
    with pytest.raises(ValueError, match="valid"):
        dpo.dpo_loss([0.0], [0.0], [0.0], [0.0], [True], loss_type="kto")


def test_sequence_logps_masks_padding():
    lp = np.array([[-1.0, -2.0, np.nan], [np.inf, -0.5, -0.5]], np.float32)
    m = np.array([[1, 1, 0], [0, 1, 1]])
    np.testing.assert_allclose(np.asarray(dpo.sequence_logps(lp, m)), [-3.0, -1.0])


def test_preference_pairs():
    #          group 0: c w w c | group 1: c c | group 2: w c(invalid) w
    correct = np.array([1, 0, 0, 1, 1, 1, 0, 1, 0], bool)
    group = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    valid = np.array([1, 1, 1, 1, 1, 1, 1, 0, 1], bool)
    ch, rj, ok = dpo.preference_pairs(correct, group, valid, num_groups=3, pairs_per_group=2)
    assert ch.shape == (6,) and ok.tolist() == [True, True, False, False, False, False]
    assert ch[:2].tolist() == [0, 3] and rj[:2].tolist() == [1, 2]
    ch, rj, ok = dpo.preference_pairs(correct, group, valid, num_groups=3, pairs_per_group=1)
    assert ok.tolist() == [True, False, False] and (ch[0], rj[0]) == (0, 1)
