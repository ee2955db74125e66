import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpalign.alphabet import DNA, LETTERS, PROTEIN, Alphabet, pack5, unpack5
from dpalign.errors import InputError


def test_letters_put_acgt_first_and_iupac_below_16():
    assert LETTERS[:4] == "ACGT"
    assert set("ACGTNRYSWKMBDHV") <= set(LETTERS[:16])


def test_encode_is_case_insensitive_and_names_the_bad_position():
    alpha = Alphabet("letters", LETTERS)
    assert list(alpha.encode("acgT")) == [0, 1, 2, 3]
    with pytest.raises(InputError) as err:
        alpha.encode("ACG1T", record="r7")
    assert err.value.record == "r7" and err.value.column == 4
    assert "'1'" in str(err.value) and "r7" in str(err.value)


def test_dna_reference_states_follow_papara():
    states = DNA.encode_reference("ACGTUNn?.-Ry")
    assert list(states) == [1, 2, 4, 8, 8, 15, 15, 15, 15, 15, 5, 10]
    assert DNA.letters(states) == "ACGTT-----RY"
    with pytest.raises(InputError) as err:
        DNA.encode_reference("ACXG", record="t1")
    assert err.value.column == 3


def test_dna_reads_drop_what_papara_drops_and_count_it():
    states, lost = DNA.encode_read("ACNNGT-T?")
    assert DNA.letters(states) == "ACGTT"
    assert lost == 3  # two N and one ?; the alignment gap is not counted
    states, lost = DNA.encode_read("acgt")  # lowercase is upper-cased (improvement)
    assert DNA.letters(states) == "ACGT" and lost == 0
    with pytest.raises(InputError) as err:
        DNA.encode_read("AC#G", record="q1")
    assert err.value.column == 3


def test_protein_states():
    states = PROTEIN.encode_reference("ARBZX-")
    assert states[0] == 1 and states[1] == 2
    assert states[2] == (1 << 2) | (1 << 3)  # B = N|D
    assert states[4] == states[5] == PROTEIN.gap
    assert PROTEIN.letters(states) == "ARBZ--"
    reads, lost = PROTEIN.encode_read("ARBX")
    assert PROTEIN.letters(reads) == "AR" and lost == 2


@given(st.integers(1, 40), st.integers(1, 5), st.randoms())
def test_pack5_round_trips(n, width, rnd):
    states = np.array([[rnd.randrange(16) for _ in range(width)] for _ in range(n)], np.uint8)
    flags = np.array([[rnd.randrange(2) for _ in range(width)] for _ in range(n)], np.uint8)
    words = pack5(states, flags)
    assert words.shape == (-(-n // 6), width)
    back_states, back_flags = unpack5(words, n)
    np.testing.assert_array_equal(back_states, states)
    np.testing.assert_array_equal(back_flags, flags)
