//! ALFWorld vocabulary (spec §2.9): receptacle classes, affordances and the canContain relation
//! (`VAL_RECEPTACLE_OBJECTS` of `alfworld/gen/constants.py`, sliced variants omitted because
//! sliced games are filtered out), plus the room priors the generator draws from.

/// Receptacle classes that open and close.
pub const OPENABLE: [&str; 6] = ["Fridge", "Cabinet", "Microwave", "Drawer", "Safe", "Box"];

/// Objects that are receptacles too (an object can be inside them).
pub const RECEPTACLE_OBJECTS: [&str; 7] = ["Bowl", "Box", "Cup", "Mug", "Pan", "Plate", "Pot"];

/// Heatable object classes.
pub const HEATABLE: [&str; 8] = ["Apple", "Bread", "Cup", "Egg", "Mug", "Plate", "Potato", "Tomato"];
/// Coolable object classes.
pub const COOLABLE: [&str; 13] = [
    "Apple", "Bowl", "Bread", "Cup", "Egg", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato",
    "Tomato", "WineBottle",
];
/// Cleanable object classes.
pub const CLEANABLE: [&str; 21] = [
    "Apple", "Bowl", "ButterKnife", "Cloth", "Cup", "DishSponge", "Egg", "Fork", "Kettle", "Knife",
    "Ladle", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato", "SoapBar", "Spatula", "Spoon",
    "Tomato",
];
/// Toggleable object classes.
pub const TOGGLEABLE: [&str; 2] = ["DeskLamp", "FloorLamp"];
/// Sliceable object classes.
pub const SLICEABLE: [&str; 6] = ["Apple", "Bread", "Egg", "Lettuce", "Potato", "Tomato"];

const TABLE_TOP: &[&str] = &[
    "AlarmClock", "Apple", "BaseballBat", "BasketBall", "Book", "Bowl", "Box", "Bread",
    "ButterKnife", "Candle", "CD", "CellPhone", "Cloth", "CreditCard", "Cup", "DishSponge",
    "Glassbottle", "Egg", "Fork", "Kettle", "KeyChain", "Knife", "Ladle", "Laptop", "Lettuce",
    "Mug", "Newspaper", "Pan", "PaperTowel", "Pen", "Pencil", "PepperShaker", "Plate", "Pot",
    "Potato", "RemoteControl", "SaltShaker", "SoapBar", "SoapBottle", "Spatula", "Spoon",
    "SprayBottle", "Statue", "TennisRacket", "TissueBox", "ToiletPaper", "ToiletPaperRoll",
    "Tomato", "Vase", "Watch", "WateringCan", "WineBottle", "HandTowel",
];
const SEAT: &[&str] = &[
    "BasketBall", "Book", "Box", "CellPhone", "Cloth", "CreditCard", "KeyChain", "Laptop",
    "Newspaper", "Pillow", "RemoteControl",
];
const DESK: &[&str] = &[
    "AlarmClock", "BasketBall", "Book", "Bowl", "Box", "Candle", "CD", "CellPhone", "Cloth",
    "CreditCard", "Cup", "Glassbottle", "KeyChain", "Laptop", "Mug", "Newspaper", "Pen", "Pencil",
    "Plate", "RemoteControl", "SoapBottle", "SprayBottle", "Statue", "TennisRacket", "TissueBox",
    "ToiletPaper", "ToiletPaperRoll", "Vase", "Watch", "WateringCan", "WineBottle",
];

/// `canContain`: which object classes a receptacle class can hold.
pub fn can_contain(receptacle: &str) -> &'static [&'static str] {
    match receptacle {
        "Pot" | "Pan" => &[
            "Apple", "ButterKnife", "DishSponge", "Egg", "Fork", "Knife", "Ladle", "Lettuce",
            "Potato", "Spatula", "Spoon", "Tomato",
        ],
        "Bowl" => &[
            "Apple", "ButterKnife", "DishSponge", "Egg", "Fork", "Knife", "Ladle", "Lettuce",
            "Potato", "Spatula", "Spoon", "Tomato", "Candle", "CD", "CellPhone", "Cloth",
            "CreditCard", "KeyChain", "Mug", "PaperTowel", "Pen", "Pencil", "RemoteControl",
            "Watch",
        ],
        "CoffeeMachine" => &["Mug"],
        "Microwave" => &[
            "Apple", "Bowl", "Bread", "Cup", "Egg", "Glassbottle", "Mug", "Plate", "Potato",
            "Tomato",
        ],
        "StoveBurner" => &["Kettle", "Pan", "Pot"],
        "Fridge" => &[
            "Apple", "Bowl", "Bread", "Cup", "Egg", "Glassbottle", "Lettuce", "Mug", "Pan",
            "Plate", "Pot", "Potato", "Tomato", "WineBottle",
        ],
        "Mug" => &["ButterKnife", "Fork", "Knife", "Pen", "Pencil", "Spoon", "KeyChain", "Watch"],
        "Plate" => &[
            "Apple", "ButterKnife", "DishSponge", "Egg", "Fork", "Knife", "Ladle", "Lettuce",
            "Mug", "Potato", "Spatula", "Spoon", "Tomato", "AlarmClock", "Book", "Candle", "CD",
            "CellPhone", "Cloth", "CreditCard", "Glassbottle", "KeyChain", "PaperTowel", "Pen",
            "Pencil", "TissueBox", "Watch",
        ],
        "Cup" => &["ButterKnife", "Fork", "Spoon"],
        "Sofa" | "ArmChair" | "Ottoman" => SEAT,
        "Box" => &[
            "AlarmClock", "Book", "Candle", "CD", "CellPhone", "Cloth", "CreditCard",
            "DishSponge", "Glassbottle", "KeyChain", "Mug", "PaperTowel", "Pen", "Pencil",
            "RemoteControl", "Statue", "TissueBox", "Vase", "Watch",
        ],
        "Dresser" => &[
            "AlarmClock", "BasketBall", "Book", "Bowl", "Box", "Candle", "CD", "CellPhone",
            "Cloth", "CreditCard", "Cup", "Glassbottle", "KeyChain", "Laptop", "Mug", "Newspaper",
            "Pen", "Pencil", "Plate", "RemoteControl", "SprayBottle", "Statue", "TennisRacket",
            "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Vase", "Watch", "WateringCan",
            "WineBottle",
        ],
        "LaundryHamper" => &["Cloth"],
        "Desk" => DESK,
        "Bed" => &[
            "BaseballBat", "BasketBall", "Book", "CellPhone", "Laptop", "Newspaper", "Pillow",
            "TennisRacket",
        ],
        "Toilet" => &[
            "Candle", "Cloth", "DishSponge", "Newspaper", "PaperTowel", "SoapBar", "SoapBottle",
            "SprayBottle", "TissueBox", "ToiletPaper", "ToiletPaperRoll", "HandTowel",
        ],
        "ToiletPaperHanger" => &["ToiletPaper", "ToiletPaperRoll"],
        "TowelHolder" => &["Towel"],
        "HandTowelHolder" => &["HandTowel"],
        "Cart" => &[
            "Candle", "Cloth", "DishSponge", "Mug", "PaperTowel", "Plunger", "SoapBar",
            "SoapBottle", "SprayBottle", "Statue", "TissueBox", "ToiletPaper", "ToiletPaperRoll",
            "Vase", "HandTowel",
        ],
        "BathtubBasin" => &["Cloth", "DishSponge", "SoapBar", "HandTowel"],
        "SinkBasin" => &[
            "Apple", "Bowl", "ButterKnife", "Cloth", "Cup", "DishSponge", "Egg", "Glassbottle",
            "Fork", "Kettle", "Knife", "Ladle", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato",
            "SoapBar", "Spatula", "Spoon", "Tomato", "HandTowel",
        ],
        "Cabinet" => &[
            "Book", "Bowl", "Box", "Candle", "CD", "Cloth", "Cup", "DishSponge", "Glassbottle",
            "Kettle", "Ladle", "Mug", "Newspaper", "Pan", "PepperShaker", "Plate", "Plunger",
            "Pot", "SaltShaker", "SoapBar", "SoapBottle", "SprayBottle", "TissueBox",
            "ToiletPaper", "ToiletPaperRoll", "Vase", "WateringCan", "WineBottle", "HandTowel",
        ],
        "DiningTable" | "CoffeeTable" | "SideTable" | "CounterTop" => TABLE_TOP,
        "Shelf" => &[
            "AlarmClock", "Book", "Bowl", "Box", "Candle", "CD", "CellPhone", "Cloth",
            "CreditCard", "Cup", "DishSponge", "Glassbottle", "Kettle", "KeyChain", "Mug",
            "Newspaper", "PaperTowel", "Pen", "Pencil", "PepperShaker", "Plate", "Pot",
            "RemoteControl", "SaltShaker", "SoapBar", "SoapBottle", "SprayBottle", "Statue",
            "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Vase", "Watch", "WateringCan",
            "WineBottle", "HandTowel",
        ],
        "Drawer" => &[
            "Book", "ButterKnife", "Candle", "CD", "CellPhone", "Cloth", "CreditCard",
            "DishSponge", "Fork", "KeyChain", "Knife", "Ladle", "Newspaper", "Pen", "Pencil",
            "PepperShaker", "RemoteControl", "SaltShaker", "SoapBar", "SoapBottle", "Spatula",
            "Spoon", "SprayBottle", "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Watch",
            "WateringCan", "HandTowel",
        ],
        "GarbageCan" => &[
            "Apple", "Bread", "CD", "Cloth", "DishSponge", "Egg", "Lettuce", "Newspaper",
            "PaperTowel", "Pen", "Pencil", "Potato", "SoapBar", "SoapBottle", "SprayBottle",
            "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Tomato", "WineBottle", "HandTowel",
        ],
        "Safe" => &["CD", "CellPhone", "CreditCard", "KeyChain", "Statue", "Vase", "Watch"],
        "TVStand" => &["TissueBox"],
        // Toaster holds only BreadSliced, which generated games do not use.
        _ => &[],
    }
}

/// Whether `receptacle` can hold `object` (class names, CamelCase).
pub fn contains(receptacle: &str, object: &str) -> bool {
    can_contain(receptacle).contains(&object)
}

/// The room types of the ALFRED scenes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// FloorPlan 1–30.
    Kitchen,
    /// FloorPlan 201–230.
    LivingRoom,
    /// FloorPlan 301–330.
    Bedroom,
    /// FloorPlan 401–430.
    Bathroom,
}

/// Receptacle classes of a room with (min, max) instance counts: the generator's scene priors,
/// shaped after the ALFRED floor plans.
pub fn room_receptacles(room: Room) -> &'static [(&'static str, u8, u8)] {
    match room {
        Room::Kitchen => &[
            ("Cabinet", 3, 9),
            ("CoffeeMachine", 1, 1),
            ("CounterTop", 1, 3),
            ("DiningTable", 0, 1),
            ("Drawer", 1, 5),
            ("Fridge", 1, 1),
            ("GarbageCan", 1, 1),
            ("Microwave", 1, 1),
            ("Shelf", 0, 3),
            ("SinkBasin", 1, 1),
            ("StoveBurner", 2, 4),
            ("Toaster", 1, 1),
        ],
        Room::LivingRoom => &[
            ("ArmChair", 0, 2),
            ("Cabinet", 0, 4),
            ("CoffeeTable", 1, 2),
            ("Drawer", 0, 4),
            ("Dresser", 0, 1),
            ("GarbageCan", 1, 1),
            ("Ottoman", 0, 1),
            ("Shelf", 0, 4),
            ("SideTable", 1, 3),
            ("Sofa", 1, 1),
            ("TVStand", 0, 1),
        ],
        Room::Bedroom => &[
            ("ArmChair", 0, 1),
            ("Bed", 1, 1),
            ("Desk", 1, 2),
            ("Drawer", 1, 6),
            ("Dresser", 0, 1),
            ("GarbageCan", 1, 1),
            ("LaundryHamper", 0, 1),
            ("Safe", 0, 1),
            ("Shelf", 0, 4),
            ("SideTable", 1, 2),
        ],
        Room::Bathroom => &[
            ("BathtubBasin", 0, 1),
            ("Cabinet", 1, 4),
            ("CounterTop", 1, 1),
            ("Drawer", 0, 4),
            ("GarbageCan", 1, 1),
            ("HandTowelHolder", 0, 1),
            ("Shelf", 0, 2),
            ("SinkBasin", 1, 2),
            ("Toilet", 1, 1),
            ("ToiletPaperHanger", 1, 1),
            ("TowelHolder", 0, 1),
        ],
    }
}

/// Small object classes that appear in a room (targets and distractors).
pub fn room_objects(room: Room) -> &'static [&'static str] {
    match room {
        Room::Kitchen => &[
            "Apple", "Bowl", "Bread", "ButterKnife", "Cup", "DishSponge", "Egg", "Fork", "Kettle",
            "Knife", "Ladle", "Lettuce", "Mug", "Pan", "PepperShaker", "Plate", "Pot", "Potato",
            "SaltShaker", "SoapBottle", "Spatula", "Spoon", "Tomato", "WineBottle",
        ],
        Room::LivingRoom => &[
            "Book", "Box", "CellPhone", "CreditCard", "KeyChain", "Laptop", "Newspaper", "Pillow",
            "RemoteControl", "Statue", "Vase", "Watch", "WateringCan",
        ],
        Room::Bedroom => &[
            "AlarmClock", "BaseballBat", "BasketBall", "Book", "CD", "CellPhone", "CreditCard",
            "KeyChain", "Laptop", "Mug", "Pen", "Pencil", "Pillow", "TennisRacket",
        ],
        Room::Bathroom => &[
            "Candle", "Cloth", "DishSponge", "HandTowel", "SoapBar", "SoapBottle", "SprayBottle",
            "TissueBox", "ToiletPaper", "Towel",
        ],
    }
}

/// Receptacle classes of the games (spec §2.9), CamelCase.
pub const RECEPTACLE_CLASSES: [&str; 29] = [
    "ArmChair", "BathtubBasin", "Bed", "Cabinet", "Cart", "CoffeeMachine", "CoffeeTable",
    "CounterTop", "Desk", "DiningTable", "Drawer", "Dresser", "Fridge", "GarbageCan",
    "HandTowelHolder", "LaundryHamper", "Microwave", "Ottoman", "Safe", "Shelf", "SideTable",
    "SinkBasin", "Sofa", "StoveBurner", "Toaster", "Toilet", "ToiletPaperHanger", "TowelHolder",
    "TVStand",
];

/// [`can_contain`] by the lowercase display class (`sinkbasin`).
pub fn can_contain_lower(lower: &str) -> &'static [&'static str] {
    RECEPTACLE_CLASSES
        .iter()
        .find(|c| c.eq_ignore_ascii_case(lower))
        .map_or(&[], |c| can_contain(c))
}
