"""Languages' English names, one table for everything that shows or reads a language by name:
the server's page (its header, its choosers) and the resolver of ``--target-lang`` and
``target_lang`` (tfm.data.language_marks.ModelLanguages), so that what the page shows is what
a person may type.

A code's name is its language's (ISO 639-1 ``de`` or ISO 639-3 ``deu``: "German") with its
script's where the code names one (NLLB-200's ``deu_Latn``: "German (Latin)") and its region's
code otherwise (``pt_BR``: "Portuguese (BR)"). A code the table does not know has no name (it
is shown, and typed, as the code).
"""

from __future__ import annotations

import re

# ISO 639-1 codes and their languages' English names.
_NAMES = {
    "aa": "Afar", "ab": "Abkhazian", "af": "Afrikaans", "ak": "Akan", "am": "Amharic",
    "an": "Aragonese", "ar": "Arabic", "as": "Assamese", "av": "Avaric", "ay": "Aymara",
    "az": "Azerbaijani", "ba": "Bashkir", "be": "Belarusian", "bg": "Bulgarian",
    "bm": "Bambara", "bn": "Bangla", "bo": "Tibetan", "br": "Breton", "bs": "Bosnian",
    "ca": "Catalan", "ce": "Chechen", "co": "Corsican", "cs": "Czech", "cv": "Chuvash",
    "cy": "Welsh", "da": "Danish", "de": "German", "dv": "Divehi", "dz": "Dzongkha",
    "ee": "Ewe", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "ff": "Fula", "fi": "Finnish",
    "fj": "Fijian", "fo": "Faroese", "fr": "French", "fy": "Western Frisian", "ga": "Irish",
    "gd": "Scottish Gaelic", "gl": "Galician", "gn": "Guarani", "gu": "Gujarati",
    "gv": "Manx", "ha": "Hausa", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "ht": "Haitian Creole", "hu": "Hungarian", "hy": "Armenian", "id": "Indonesian",
    "ig": "Igbo", "is": "Icelandic", "it": "Italian", "iu": "Inuktitut", "ja": "Japanese",
    "jv": "Javanese", "ka": "Georgian", "kg": "Kongo", "ki": "Kikuyu", "kk": "Kazakh",
    "kl": "Kalaallisut", "km": "Khmer", "kn": "Kannada", "ko": "Korean", "kr": "Kanuri",
    "ks": "Kashmiri", "ku": "Kurdish", "kv": "Komi", "kw": "Cornish", "ky": "Kyrgyz",
    "la": "Latin", "lb": "Luxembourgish", "lg": "Ganda", "li": "Limburgish", "ln": "Lingala",
    "lo": "Lao", "lt": "Lithuanian", "lu": "Luba-Katanga", "lv": "Latvian", "mg": "Malagasy",
    "mi": "Maori", "mk": "Macedonian", "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi",
    "ms": "Malay", "mt": "Maltese", "my": "Burmese", "nb": "Norwegian Bokmål",
    "ne": "Nepali", "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian",
    "ny": "Nyanja", "oc": "Occitan", "om": "Oromo", "or": "Odia", "os": "Ossetic",
    "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese", "qu": "Quechua",
    "rm": "Romansh", "rn": "Rundi", "ro": "Romanian", "ru": "Russian", "rw": "Kinyarwanda",
    "sa": "Sanskrit", "sc": "Sardinian", "sd": "Sindhi", "se": "Northern Sami", "sg": "Sango",
    "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian", "sm": "Samoan", "sn": "Shona",
    "so": "Somali", "sq": "Albanian", "sr": "Serbian", "ss": "Swati", "st": "Southern Sotho",
    "su": "Sundanese", "sv": "Swedish", "sw": "Swahili", "ta": "Tamil", "te": "Telugu",
    "tg": "Tajik", "th": "Thai", "ti": "Tigrinya", "tk": "Turkmen", "tl": "Tagalog",
    "tn": "Tswana", "to": "Tongan", "tr": "Turkish", "ts": "Tsonga", "tt": "Tatar",
    "tw": "Twi", "ug": "Uyghur", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek",
    "vi": "Vietnamese", "vo": "Volapük", "wa": "Walloon", "wo": "Wolof", "xh": "Xhosa",
    "yi": "Yiddish", "yo": "Yoruba", "zh": "Chinese", "zu": "Zulu",
}

# ISO 639-3 codes (as NLLB-200 and multilingual OPUS-MT models write them) of the languages
# above; a macrolanguage's main member too (``arb``: Arabic, ``cmn``: Chinese).
_ISO639_3 = {
    "aar": "aa", "abk": "ab", "afr": "af", "aka": "ak", "amh": "am", "arg": "an", "ara": "ar",
    "arb": "ar", "asm": "as", "ava": "av", "aym": "ay", "aze": "az", "azj": "az", "bak": "ba",
    "bel": "be", "bul": "bg", "bam": "bm", "ben": "bn", "bod": "bo", "bre": "br", "bos": "bs",
    "cat": "ca", "che": "ce", "cos": "co", "ces": "cs", "chv": "cv", "cym": "cy", "dan": "da",
    "deu": "de", "div": "dv", "dzo": "dz", "ewe": "ee", "ell": "el", "eng": "en", "epo": "eo",
    "spa": "es", "est": "et", "ekk": "et", "eus": "eu", "fas": "fa", "pes": "fa", "ful": "ff",
    "fin": "fi", "fij": "fj", "fao": "fo", "fra": "fr", "fry": "fy", "gle": "ga", "gla": "gd",
    "glg": "gl", "grn": "gn", "guj": "gu", "glv": "gv", "hau": "ha", "heb": "he", "hin": "hi",
    "hrv": "hr", "hat": "ht", "hun": "hu", "hye": "hy", "ind": "id", "ibo": "ig", "isl": "is",
    "ita": "it", "iku": "iu", "jpn": "ja", "jav": "jv", "kat": "ka", "kon": "kg", "kik": "ki",
    "kaz": "kk", "kal": "kl", "khm": "km", "kan": "kn", "kor": "ko", "kau": "kr", "kas": "ks",
    "kur": "ku", "kom": "kv", "cor": "kw", "kir": "ky", "lat": "la", "ltz": "lb", "lug": "lg",
    "lim": "li", "lin": "ln", "lao": "lo", "lit": "lt", "lub": "lu", "lav": "lv", "lvs": "lv",
    "mlg": "mg", "plt": "mg", "mri": "mi", "mkd": "mk", "mal": "ml", "mon": "mn", "khk": "mn",
    "mar": "mr", "msa": "ms", "zsm": "ms", "mlt": "mt", "mya": "my", "nob": "nb", "nep": "ne",
    "npi": "ne", "nld": "nl", "nno": "nn", "nor": "no", "nya": "ny", "oci": "oc", "orm": "om",
    "gaz": "om", "ori": "or", "ory": "or", "oss": "os", "pan": "pa", "pol": "pl", "pus": "ps",
    "pbt": "ps", "por": "pt", "que": "qu", "roh": "rm", "run": "rn", "ron": "ro", "rus": "ru",
    "kin": "rw", "san": "sa", "srd": "sc", "snd": "sd", "sme": "se", "sag": "sg", "sin": "si",
    "slk": "sk", "slv": "sl", "smo": "sm", "sna": "sn", "som": "so", "sqi": "sq", "als": "sq",
    "srp": "sr", "ssw": "ss", "sot": "st", "sun": "su", "swe": "sv", "swa": "sw", "swh": "sw",
    "tam": "ta", "tel": "te", "tgk": "tg", "tha": "th", "tir": "ti", "tuk": "tk", "tgl": "tl",
    "tsn": "tn", "ton": "to", "tur": "tr", "tso": "ts", "tat": "tt", "twi": "tw", "uig": "ug",
    "ukr": "uk", "urd": "ur", "uzb": "uz", "uzn": "uz", "vie": "vi", "vol": "vo", "wln": "wa",
    "wol": "wo", "xho": "xh", "yid": "yi", "ydd": "yi", "yor": "yo", "zho": "zh", "cmn": "zh",
    "zul": "zu",
}

# ISO 15924 script codes (NLLB-200's second half) and their English names.
_SCRIPTS = {
    "Arab": "Arabic", "Armn": "Armenian", "Beng": "Bangla", "Bopo": "Bopomofo",
    "Cyrl": "Cyrillic", "Deva": "Devanagari", "Ethi": "Ethiopic", "Geor": "Georgian",
    "Grek": "Greek", "Gujr": "Gujarati", "Guru": "Gurmukhi", "Hang": "Hangul",
    "Hani": "Han", "Hans": "Simplified", "Hant": "Traditional", "Hebr": "Hebrew",
    "Jpan": "Japanese", "Khmr": "Khmer", "Knda": "Kannada", "Kore": "Korean", "Laoo": "Lao",
    "Latn": "Latin", "Mlym": "Malayalam", "Mong": "Mongolian", "Mymr": "Myanmar",
    "Olck": "Ol Chiki", "Orya": "Odia", "Sinh": "Sinhala", "Taml": "Tamil", "Telu": "Telugu",
    "Tfng": "Tifinagh", "Thaa": "Thaana", "Thai": "Thai", "Tibt": "Tibetan",
}

_CODE = re.compile(r"(?:>>)?([A-Za-z]{2,3})(?:[_-]([A-Za-z0-9]{2,8}))?(?:<<)?")


def language_name(code: str) -> str | None:
    """The English name of language ``code`` (``de``, ``deu``, ``deu_Latn``, ``pt-BR``,
    ``>>fr<<``): "German", "German (Latin)", "Portuguese (BR)"; None for a code the table does
    not know."""
    match = _CODE.fullmatch(code.strip())
    if match is None:
        return None
    language, subtag = match.group(1).lower(), match.group(2)
    name = _NAMES.get(_ISO639_3.get(language, language))
    if name is None:
        return None
    if subtag is None:
        return name
    script = _SCRIPTS.get(subtag[:1].upper() + subtag[1:].lower())
    return f"{name} ({script or subtag.upper()})"


def labelled(code: str) -> str:
    """How the page shows a language: "German (Latin) (deu_Latn)", or the code alone."""
    name = language_name(code)
    return f"{name} ({code})" if name else code


def names_of(codes: list[str]) -> dict[str, str]:
    """The name of each of ``codes`` that the table knows (for the page)."""
    return {code: name for code in codes if (name := language_name(code)) is not None}


def matching(typed: str, codes: list[str]) -> list[str]:
    """The codes among ``codes`` that ``typed`` names, ignoring case and surrounding spaces:
    the code itself (``deu_Latn``, ``>>de<<`` for ``de``) if one is it; else those whose name
    or label is it ("German (Latin)", "German (Latin) (deu_Latn)"); else those whose language
    is it ("German": every script's). Several: the name is ambiguous (the caller lists them).
    """
    wanted = " ".join(typed.split()).lower()
    bare = wanted[2:-2] if wanted.startswith(">>") and wanted.endswith("<<") else wanted
    exact = [c for c in codes if c.lower() in (wanted, bare)]
    if exact:
        return exact
    named = [c for c in codes if wanted in ((language_name(c) or "").lower(),
                                            labelled(c).lower())]
    if named:
        return named
    return [c for c in codes
            if (language_name(c) or "").lower().split(" (")[0] == wanted]


def code_of(name: str) -> str | None:
    """The ISO 639-1 code of a language's English name ("german": de), or None."""
    wanted = " ".join(name.split()).lower()
    return next((code for code, known in _NAMES.items() if known.lower() == wanted), None)
