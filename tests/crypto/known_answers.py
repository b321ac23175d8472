"""Known answers typed in from RFC 8439 (sections 2 and appendix A),
draft-irtf-cfrg-xchacha (sections 2.2.1 and A.3) and
draft-strombergson-chacha-test-vectors (reduced rounds)."""

KEY_00_1F = bytes(range(32))
KEY_80_9F = bytes(range(0x80, 0xA0))
SUNSCREEN = (b"Ladies and Gentlemen of the class of '99: If I could offer you only one "
             b"tip for the future, sunscreen would be it.")

# RFC 8439 2.3.2: one block, counter 1.
BLOCK_2_3_2 = dict(
    key=KEY_00_1F, nonce=bytes.fromhex("000000090000004a00000000"), counter=1,
    keystream=bytes.fromhex(
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"),
)

# RFC 8439 2.4.2: encryption, counter 1.
ENC_2_4_2 = dict(
    key=KEY_00_1F, nonce=bytes.fromhex("000000000000004a00000000"), counter=1,
    plaintext=SUNSCREEN,
    ciphertext=bytes.fromhex(
        "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
        "f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8"
        "07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
        "5af90bbf74a35be6b40b8eedf2785e42874d"),
)

# RFC 8439 A.1: block function vectors 1, 2 and 5 (all-zero and counter/nonce variants).
BLOCKS_A_1 = [
    dict(key=bytes(32), nonce=bytes(12), counter=0, keystream=bytes.fromhex(
        "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
        "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586")),
    dict(key=bytes(32), nonce=bytes(12), counter=1, keystream=bytes.fromhex(
        "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
        "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f")),
]

# RFC 8439 2.5.2 and A.3: Poly1305.
POLY_2_5_2 = dict(
    key=bytes.fromhex("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b"),
    message=b"Cryptographic Forum Research Group",
    tag=bytes.fromhex("a8061dc1305136c6c22b8baf0c0127a9"),
)
POLY_A_3 = [
    # vector 1: all-zero key and message
    dict(key=bytes(32), message=bytes(64), tag=bytes(16)),
    # vector 5: r = 2, message = 2^128 - 1 (carries past 2^130 - 5)
    dict(key=bytes.fromhex("02" + "00" * 31), message=b"\xff" * 16,
         tag=bytes.fromhex("03000000000000000000000000000000")),
    # vector 6: s = 2^128 - 1 style wrap of the final addition
    dict(key=bytes.fromhex("02" + "00" * 15 + "ff" * 16), message=bytes.fromhex("02" + "00" * 15),
         tag=bytes.fromhex("03000000000000000000000000000000")),
    # vector 11: h reaches 2^130 - 5 exactly (the final reduction)
    dict(key=bytes.fromhex("01" + "00" * 31),
         message=bytes.fromhex("ff" * 16 + "fbfefefefefefefefefefefefefefefe" + "01" * 16),
         tag=bytes(16)),
]

# RFC 8439 2.6.2: Poly1305 key generation.
KEYGEN_2_6_2 = dict(
    key=KEY_80_9F, nonce=bytes.fromhex("000000000001020304050607"),
    otk=bytes.fromhex("8ad5a08b905f81cc815040274ab29471a833b637e3fd0da508dbb8e2fdd1a646"),
)

# RFC 8439 2.8.2: AEAD.
AEAD_2_8_2 = dict(
    key=KEY_80_9F, nonce=bytes.fromhex("070000004041424344454647"),
    aad=bytes.fromhex("50515253c0c1c2c3c4c5c6c7"), plaintext=SUNSCREEN,
    ciphertext=bytes.fromhex(
        "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d6"
        "3dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b36"
        "92ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc"
        "3ff4def08e4b7a9de576d26586cec64b6116"),
    tag=bytes.fromhex("1ae10b594f09e26a7e902ecbd0600691"),
)

# draft-irtf-cfrg-xchacha 2.2.1: HChaCha20.
HCHACHA_2_2_1 = dict(
    key=KEY_00_1F, nonce=bytes.fromhex("000000090000004a0000000031415927"),
    out=bytes.fromhex("82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"),
)

# draft-strombergson-chacha-test-vectors: all-zero key and IV, first 64 bytes.
REDUCED_ROUNDS_ZERO = {
    8: bytes.fromhex("3e00ef2f895f40d67f5bb8e81f09a5a12c840ec3ce9a7f3b181be188ef711a1e"
                     "984ce172b9216f419f445367456d5619314a42a3da86b001387bfdb80e0cfe42"),
    12: bytes.fromhex("9bf49a6a0755f953811fce125f2683d50429c3bb49e074147e0089a52eae155f"
                      "0564f879d27ae3c02ce82834acfa8c793a629f2ca0de6919610be82f411326be"),
    20: bytes.fromhex("76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
                      "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"),
}
